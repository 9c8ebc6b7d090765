"""Tool calls that wait for a person: a run pauses before an *ask* tool with no task held,
and a decision (approve, deny, edit, always) resumes it through a strict provider; parallel
calls, two deciders at once, expiry, Stop, and decisions nobody may take."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync
from django.utils import timezone

from chat import agent
from chat.agent.approvals import DENIED, NOT_ALLOWED
from chat.models import (
    Agent,
    AgentVersion,
    Conversation,
    McpServer,
    McpTool,
    Run,
    RunLease,
    ToolCall,
)
from chat.runs import approvals, resume, tasks
from chat.runs.exceptions import RunRefused
from chat.testing import approvals as flow
from chat.testing import factories as make
from chat.testing.approvals import NOTE, decided, waiting
from chat.testing.openai_script import text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def quick() -> AsyncIterator[None]:
    yield
    tasks.stopping.clear()


@sync
def on_provider(fake: FakeOpenAIServer, *tools: str, **parameters: Any) -> Conversation:
    return flow.on_provider(fake, make.user("ada"), *tools, **parameters)


def tool_replies(fake: FakeOpenAIServer, request: int) -> dict[str, str]:
    messages = fake.requests[request].body["messages"]
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


@pytest.fixture
def ada() -> Any:
    return make.user("ada")


async def test_a_write_tool_waits_holding_no_task_and_approving_runs_it_once(
    fake_openai: FakeOpenAIServer, ada: Any
) -> None:
    made = await on_provider(fake_openai, "handoff_note")
    fake_openai.enqueue(tool_turn([("h", "handoff_note", NOTE)]), text_turn("Handed off."))

    run = await waiting(made)

    assert run.pk not in tasks.RUNS.running and run.worker == "" and run.lease_expires_at is None
    assert run.waiting_until is not None
    hours = (run.waiting_until - timezone.now()) / timedelta(hours=1)
    assert 23.9 < hours <= 24
    call = await ToolCall.objects.aget(run=run)
    assert (call.approval, call.policy, call.status, call.started_at) == (
        "waiting",
        "ask",
        "in_progress",
        None,
    )
    assert len(fake_openai.requests) == 1  # nothing more is asked while it waits
    ends = [lease.outcome async for lease in RunLease.objects.filter(run=run)]
    assert ends == ["waiting"]
    with pytest.raises(RunRefused, match="waits for your decision"):
        await make.start_as_owner(made, "anything else?")

    finished = await decided(ada, run, "approve")

    assert (finished.status, finished.resumes) == ("completed", 0)
    call = await ToolCall.objects.select_related("decided_by").aget(run=run)
    assert (call.status, call.approval, call.decided_by) == ("completed", "approved", ada)
    assert call.decided_at is not None and call.started_at is not None
    assert json.loads(tool_replies(fake_openai, 1)["h"])["status"] == "recorded"
    history = await make.ahistory(made)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert agent.history.validate(history) == []
    ends = [lease.outcome async for lease in RunLease.objects.filter(run=run).order_by("pk")]
    assert ends == ["waiting", "finished"]


async def test_a_denied_call_is_answered_with_the_reason_and_the_model_goes_on(
    fake_openai: FakeOpenAIServer, ada: Any
) -> None:
    made = await on_provider(fake_openai, "handoff_note")
    fake_openai.enqueue(tool_turn([("h", "handoff_note", NOTE)]), text_turn("Understood."))
    run = await waiting(made)

    finished = await decided(ada, run, "deny", reason="not before Friday")

    assert finished.status == "completed"
    assert tool_replies(fake_openai, 1) == {"h": f"{DENIED}: not before Friday"}
    call = await ToolCall.objects.aget(run=run)
    assert (call.status, call.failure, call.approval, call.decision_reason) == (
        "failed",
        "denied",
        "denied",
        "not before Friday",
    )


async def test_edited_arguments_are_checked_then_run_and_the_record_keeps_both(
    fake_openai: FakeOpenAIServer, ada: Any
) -> None:
    made = await on_provider(fake_openai, "handoff_note")
    fake_openai.enqueue(tool_turn([("h", "handoff_note", NOTE)]), text_turn("Done."))
    run = await waiting(made)
    call = await ToolCall.objects.aget(run=run)
    edit = sync(approvals.decide)

    for text, reason in [
        ("{not json", "not valid JSON"),
        ('["a list"]', "must be a JSON object"),
        ('{"note": ""}', "do not fit the tool's schema at note:"),
        ('{"note": "x", "extra": 1}', "do not fit the tool's schema: Additional properties"),
    ]:
        with pytest.raises(approvals.DecisionRefused, match=reason):
            await edit(ada, run.pk, "edit", call=call.pk, arguments=text)
    await call.arefresh_from_db()
    assert call.approval == "waiting"  # refused edits change nothing

    edited = '{"note": "ship it on Friday", "recipient": "ops"}'
    finished = await decided(ada, run, "edit", call=call.pk, arguments=edited)

    assert finished.status == "completed"
    await call.arefresh_from_db()
    assert (call.approval, call.arguments, call.edited_arguments) == ("edited", NOTE, edited)
    assert json.loads(call.result)["recipient"] == "ops"
    sent = fake_openai.requests[1].body["messages"]
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == edited  # the call as it ran


async def test_always_allow_runs_the_tool_without_asking_from_then_on(
    fake_openai: FakeOpenAIServer, ada: Any
) -> None:
    made = await on_provider(fake_openai, "handoff_note")
    fake_openai.enqueue(
        tool_turn([("a", "handoff_note", NOTE), ("b", "handoff_note", NOTE)]),
        text_turn("Both handed off."),
    )
    run = await waiting(made)
    first = await ToolCall.objects.aget(run=run, call_id="a")

    finished = await decided(ada, run, "always", call=first.pk)

    assert finished.status == "completed"  # the other call of the tool was allowed with it
    approvals_given = [c.approval async for c in ToolCall.objects.filter(run=run)]
    assert approvals_given == ["always", "always"]
    await made.arefresh_from_db()
    assert made.always_allowed == ["handoff_note"]

    fake_openai.enqueue(tool_turn([("c", "handoff_note", NOTE)]), text_turn("Again."))
    again = await (await make.start_as_owner(made, "once more")).task
    assert again.status == "completed"
    call = await ToolCall.objects.aget(run=again)
    assert (call.approval, call.policy) == ("", "run")


async def test_parallel_calls_wait_together_and_run_once_each_is_decided(
    fake_openai: FakeOpenAIServer, ada: Any
) -> None:
    made = await on_provider(fake_openai, "handoff_note", "get_current_time", "search_cards")
    fake_openai.enqueue(
        tool_turn(
            [
                ("h", "handoff_note", NOTE),
                ("t", "get_current_time", "{}"),
                ("d", "handoff_note", '{"note": "delete the branch"}'),
            ]
        ),
        text_turn("One done, one not."),
    )
    run = await waiting(made)
    calls = {c.call_id: c async for c in ToolCall.objects.filter(run=run)}
    assert {k: (c.approval, c.started_at) for k, c in calls.items()} == {
        "h": ("waiting", None),
        "t": ("", None),  # needs no approval, runs once the turn's waiting calls are decided
        "d": ("waiting", None),
    }

    first = await sync(approvals.decide)(ada, run.pk, "approve", call=calls["h"].pk)
    assert not first.resumable
    await run.arefresh_from_db()
    assert run.status == "requires_action"
    finished = await decided(ada, run, "deny", call=calls["d"].pk)

    assert finished.status == "completed"
    replies = tool_replies(fake_openai, 1)
    assert json.loads(replies["h"])["note"] == "ship it"
    assert json.loads(replies["t"])["timezone"] == "UTC"
    assert replies["d"] == f"{DENIED}."
    assert agent.history.validate(await make.ahistory(made)) == []


async def test_deciding_all_at_once(fake_openai: FakeOpenAIServer, ada: Any) -> None:
    made = await on_provider(fake_openai, "handoff_note")
    fake_openai.enqueue(
        tool_turn([("a", "handoff_note", NOTE), ("b", "handoff_note", NOTE)]),
        text_turn("Neither."),
    )
    run = await waiting(made)

    finished = await decided(ada, run, "deny", reason="no")

    assert finished.status == "completed"
    assert tool_replies(fake_openai, 1) == {"a": f"{DENIED}: no", "b": f"{DENIED}: no"}


async def test_two_tabs_deciding_at_once_one_wins_and_the_other_is_told(
    fake_openai: FakeOpenAIServer, ada: Any
) -> None:
    made = await on_provider(fake_openai, "handoff_note")
    fake_openai.enqueue(tool_turn([("h", "handoff_note", NOTE)]), text_turn("Done."))
    run = await waiting(made)
    call = await ToolCall.objects.aget(run=run)
    decide = sync(approvals.decide, thread_sensitive=False)

    outcomes = await asyncio.gather(
        decide(ada, run.pk, "approve", call=call.pk),
        decide(ada, run.pk, "deny", call=call.pk),
        return_exceptions=True,
    )

    won = [o for o in outcomes if isinstance(o, approvals.Decided)]
    lost = [o for o in outcomes if isinstance(o, approvals.DecisionRefused)]
    assert len(won) == 1 and len(lost) == 1
    assert "already" in str(lost[0]) and "by ada" in str(lost[0])
    assert "no longer waiting" in str(lost[0])
    task = await resume.claim_and_resume(won[0].run)
    assert task is not None
    assert (await task).status == "completed"
    assert len(fake_openai.requests) == 2


async def test_a_call_no_longer_waiting_is_refused_with_one_line_and_changes_nothing(
    fake_openai: FakeOpenAIServer, ada: Any
) -> None:
    made = await on_provider(fake_openai, "handoff_note")
    fake_openai.enqueue(tool_turn([("h", "handoff_note", NOTE)]), text_turn("Done."))
    run = await waiting(made)
    call = await ToolCall.objects.aget(run=run)
    await decided(ada, run, "approve")

    with pytest.raises(approvals.DecisionRefused, match="already approved by ada at"):
        await sync(approvals.decide)(ada, run.pk, "deny", call=call.pk)
    with pytest.raises(approvals.DecisionRefused, match="no tool call waiting"):
        await sync(approvals.decide)(ada, run.pk, "approve")
    with pytest.raises(approvals.DecisionRefused, match="Unknown decision"):
        await sync(approvals.decide)(ada, run.pk, "maybe")
    await call.arefresh_from_db()
    assert call.approval == "approved" and len(fake_openai.requests) == 2


async def test_a_reader_or_a_stranger_cannot_decide(fake_openai: FakeOpenAIServer) -> None:
    made = await on_provider(fake_openai, "handoff_note")
    made.shared = True
    await made.asave()
    fake_openai.enqueue(tool_turn([("h", "handoff_note", NOTE)]))
    run = await waiting(made)
    reader = await sync(make.user)("bob")

    with pytest.raises(approvals.DecisionRefused, match="shared with you to read"):
        await sync(approvals.decide)(reader, run.pk, "approve")
    made.shared = False
    await made.asave()
    with pytest.raises(approvals.DecisionRefused, match="no tool call waiting"):
        await sync(approvals.decide)(reader, run.pk, "approve")
    with pytest.raises(approvals.DecisionRefused):
        await sync(approvals.stop)(reader, made)
    call = await ToolCall.objects.aget(run=run)
    assert call.approval == "waiting"


async def test_an_undecided_run_expires_as_denied_and_goes_on(
    fake_openai: FakeOpenAIServer, settings: Any
) -> None:
    settings.AGENTLAB_APPROVAL_TIMEOUT = 90
    made = await on_provider(fake_openai, "handoff_note")
    fake_openai.enqueue(tool_turn([("h", "handoff_note", NOTE)]), text_turn("No answer, fine."))
    run = await waiting(made)
    assert not await approvals.due().aexists()
    await Run.objects.filter(pk=run.pk).aupdate(waiting_until=timezone.now())

    (task,) = await resume.expire_waiting()
    finished = await task

    assert finished.status == "completed"
    reason = "no decision within 90 seconds (AGENTLAB_APPROVAL_TIMEOUT)"
    assert tool_replies(fake_openai, 1) == {"h": f"{DENIED}: {reason}"}
    call = await ToolCall.objects.aget(run=run)
    assert (call.approval, call.decided_by_id, call.decision_reason) == ("expired", None, reason)


async def test_stop_ends_a_waiting_run_and_keeps_the_history_valid(
    fake_openai: FakeOpenAIServer, ada: Any
) -> None:
    made = await on_provider(fake_openai, "handoff_note")
    fake_openai.enqueue(tool_turn([("h", "handoff_note", NOTE)]))
    run = await waiting(made)

    stopped = await sync(approvals.stop)(ada, made)

    assert stopped is not None and stopped.status == "cancelled"
    call = await ToolCall.objects.aget(run=run)
    assert (call.approval, call.status) == ("stopped", "cancelled")
    history = await make.ahistory(made)
    assert [m.role for m in history] == ["user", "assistant", "tool"]
    assert agent.history.validate(history) == []
    with pytest.raises(approvals.DecisionRefused, match="the run was stopped"):
        await sync(approvals.decide)(ada, run.pk, "approve", call=call.pk)
    assert await sync(approvals.stop)(ada, made) is None  # nothing waits any more
    fake_openai.enqueue(text_turn("Fresh start."))
    assert (await (await make.start_as_owner(made, "hello")).task).status == "completed"


async def test_a_never_tool_is_refused_without_asking_and_an_agent_policy_binds_its_chats(
    fake_openai: FakeOpenAIServer, ada: Any
) -> None:
    made = await on_provider(
        fake_openai,
        "handoff_note",
        "search_cards",
        tool_policies={"handoff_note": "run", "search_cards": "never"},
    )

    @sync
    def from_version() -> None:
        agent_row = Agent.objects.create(name="Careful", slug="careful", owner=ada)
        version = AgentVersion.objects.create(
            agent=agent_row,
            number=1,
            author=ada,
            parameters={
                "enabled_tools": ["handoff_note"],
                "tool_policies": {"handoff_note": "never"},
            },
        )
        made.agent_version = version
        made.save()

    await from_version()
    fake_openai.enqueue(
        tool_turn([("h", "handoff_note", NOTE), ("s", "search_cards", '{"query": "pills"}')]),
        text_turn("Neither may run."),
    )

    finished = await (await make.start_as_owner(made, "try both")).task

    assert finished.status == "completed"  # nobody was asked
    replies = tool_replies(fake_openai, 1)
    assert replies == {"h": f"{NOT_ALLOWED}.", "s": f"{NOT_ALLOWED}."}
    calls = {c.call_id: (c.failure, c.policy, c.approval) async for c in ToolCall.objects.all()}
    assert calls == {"h": ("not_allowed", "never", ""), "s": ("not_allowed", "never", "")}


async def test_policy_defaults_follow_what_a_tool_declares(db: Any) -> None:
    @sync
    def defaults() -> dict[str, str]:
        server = McpServer.objects.create(name="files", transport="stdio", command="x")
        for name, hints in [
            ("read", {"read_only_hint": True}),
            ("write", {"read_only_hint": False}),
        ]:
            McpTool.objects.create(
                server=server, name=name, exposed_name=f"files__{name}", annotations=hints
            )
        McpTool.objects.create(server=server, name="plain", exposed_name="files__plain")
        names = [
            "get_current_time",
            "search_cards",
            "handoff_note",
            "files__read",
            "files__write",
            "files__plain",
        ]
        return approvals.default_policies(names)

    assert await defaults() == {
        "get_current_time": "run",
        "search_cards": "run",
        "handoff_note": "ask",
        "files__read": "run",
        "files__write": "ask",
        "files__plain": "ask",
    }
    parameters = agent.AgentParameters(enabled_tools=("handoff_note", "get_current_time"))
    assert parameters.policies() == {"handoff_note": "ask", "get_current_time": "run"}
