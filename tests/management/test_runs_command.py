"""manage.py runs: `waiting` lists the runs that wait for approval (text and JSON); `decide`
approves or denies their calls from a script as the conversation's owner, refuses anyone else
and calls no longer waiting in one line, and leaves the run to a server or, with --wait,
resumes it here; the strict provider sees a valid history after each outcome."""

from __future__ import annotations

import asyncio
import json
import re
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from chat.agent import history
from chat.agent.approvals import DENIED
from chat.models import Conversation, ProviderProfile, Run, ToolCall
from chat.runs import resume, tasks
from chat.testing import factories as make
from chat.testing.openai_script import MODEL, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.transcripts import load_history

pytestmark = pytest.mark.django_db(transaction=True)

NOTE = '{"note": "ship it"}'


def runs(*args: str) -> str:
    out = StringIO()
    call_command("runs", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def waiting(fake: FakeOpenAIServer, *calls: str) -> Run:
    """A run of ada's on the fake provider that waits for a decision on a handoff note per
    call id, then completes."""
    made = make.conversation(make.user("ada"), "Approvals", enabled_tools=["handoff_note"])
    made.profile = ProviderProfile.objects.create(
        name="fake", base_url=fake.base_url, model=MODEL, available_to_everyone=True
    )
    made.save()
    fake.enqueue(tool_turn([(call, "handoff_note", NOTE) for call in calls]), text_turn("Done."))

    async def start() -> Run:
        return await (await make.start_as_owner(made, "hand it off")).task

    run = asyncio.run(start())
    run.refresh_from_db()
    assert run.status == "requires_action", run.error
    return run


def as_a_server() -> None:
    """What a running server's sweeper does every AGENTLAB_CLAIM_SECONDS."""

    async def sweep() -> None:
        for task in await resume.sweep():
            await task

    asyncio.run(sweep())


def tool_replies(fake: FakeOpenAIServer, request: int) -> dict[str, str]:
    messages = fake.requests[request].body["messages"]
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


def valid(run: Run) -> bool:
    return history.validate(load_history(Conversation.objects.get(pk=run.conversation_id))) == []


@pytest.fixture(autouse=True)
def quick() -> Any:
    yield
    tasks.stopping.clear()


def test_waiting_lists_each_run_and_its_calls(fake_openai: FakeOpenAIServer) -> None:
    assert runs("waiting") == "No run waits for a decision.\n"
    assert json.loads(runs("waiting", "--json")) == []
    run = waiting(fake_openai, "a", "b")
    calls = list(ToolCall.objects.filter(run=run))

    lines = runs("waiting").splitlines()

    assert lines[0].startswith(
        f"run {run.pk} · conversation {run.conversation_id} “Approvals” · owner ada · "
        "waiting since "
    )
    assert " · expires " in lines[0]
    assert lines[1] == f'  call {calls[0].pk} (a)  handoff_note · built-in  {{"note": "ship it"}}'
    assert lines[2].startswith(f"  call {calls[1].pk} (b)  handoff_note")
    assert lines[3].startswith("1 run waiting; decide with: manage.py runs decide RUN")


def test_waiting_as_json(fake_openai: FakeOpenAIServer) -> None:
    run = waiting(fake_openai, "a")
    call = ToolCall.objects.get(run=run)
    # The listing names the MCP server the call was asked on.
    ToolCall.objects.filter(pk=call.pk).update(name="docs__publish", server="docs")

    (listed,) = json.loads(runs("waiting", "--json"))

    assert listed["run"] == run.pk
    assert listed["conversation"] == {"id": run.conversation_id, "title": "Approvals"}
    assert listed["owner"] == "ada"
    assert listed["since"] and listed["expires"] > listed["since"]
    assert listed["tool_calls"] == [
        {"id": "a", "pk": call.pk, "name": "docs__publish", "server": "docs", "arguments": NOTE}
    ]
    assert "docs__publish · docs" in runs("waiting")


def test_approve_leaves_the_run_to_a_server(fake_openai: FakeOpenAIServer) -> None:
    run = waiting(fake_openai, "a", "b")

    out = runs("decide", str(run.pk), "--approve")

    assert out == (
        f"run {run.pk}: approved 2 calls (handoff_note) as ada; the run goes on. It is in "
        "progress again: a running server resumes it within 2 seconds (AGENTLAB_CLAIM_SECONDS).\n"
    )
    run.refresh_from_db()
    assert (run.status, run.worker) == ("in_progress", "")
    as_a_server()
    run.refresh_from_db()
    assert run.status == "completed"
    assert [c.approval for c in ToolCall.objects.filter(run=run)] == ["approved", "approved"]
    assert set(tool_replies(fake_openai, 1)) == {"a", "b"} and valid(run)


def test_deny_one_call_then_the_other_with_wait(fake_openai: FakeOpenAIServer) -> None:
    run = waiting(fake_openai, "a", "b")
    second = ToolCall.objects.get(run=run, call_id="b")

    out = runs("decide", str(run.pk), "--deny", "--reason", "not yet", "--call", "a")

    assert out == f"run {run.pk}: denied 1 call (handoff_note) as ada; 1 call still waits.\n"
    out = runs("decide", str(run.pk), "--deny", "--call", str(second.pk), "--wait")

    assert "Resuming it here:" in out and "✗ Handoff note" in out and "Done." in out
    assert f"run {run.pk} completed" in out
    run.refresh_from_db()
    assert run.status == "completed"
    assert tool_replies(fake_openai, 1) == {"a": f"{DENIED}: not yet", "b": f"{DENIED}."}
    assert valid(run)


def test_approve_and_wait_runs_the_call_here(fake_openai: FakeOpenAIServer) -> None:
    run = waiting(fake_openai, "a")

    out = runs("decide", str(run.pk), "--approve", "--wait")

    assert "→ Handoff note" in out and "✓ Handoff note" in out
    assert f"run {run.pk} completed" in out
    assert json.loads(tool_replies(fake_openai, 1)["a"])["note"] == "ship it" and valid(run)


def test_refusals_are_one_line_and_change_nothing(fake_openai: FakeOpenAIServer) -> None:
    run = waiting(fake_openai, "a", "b")
    make.user("grace")
    first = ToolCall.objects.get(run=run, call_id="a")
    runs("decide", str(run.pk), "--approve", "--call", "a")

    for args, refused in [
        (["--user", "grace"], f"Run {run.pk}, as 'grace': There is no tool call waiting"),
        (["--call", str(first.pk)], "This call was already approved by ada at "),
        (["--call", "zz"], f"Run {run.pk} has no tool call 'zz'."),
        (["--reason", "why"], "--reason goes with --deny"),
    ]:
        with pytest.raises(CommandError, match=re.escape(refused)):
            runs("decide", str(run.pk), "--approve", *args)
    with pytest.raises(CommandError, match="No run 999"):
        runs("decide", "999", "--deny")

    assert ToolCall.objects.get(run=run, call_id="b").approval == "waiting"
    run.refresh_from_db()
    assert run.status == "requires_action"


def test_a_team_reader_may_not_decide(fake_openai: FakeOpenAIServer) -> None:
    run = waiting(fake_openai, "a")
    Conversation.objects.filter(pk=run.conversation_id).update(shared=True)
    make.user("grace")

    with pytest.raises(CommandError, match="shared with you to read: only its owner"):
        runs("decide", str(run.pk), "--deny", "--user", "grace")

    assert ToolCall.objects.get(run=run).approval == "waiting"
