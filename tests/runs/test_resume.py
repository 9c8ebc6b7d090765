"""Runs that outlive their process, in one process: a run let go at a shutdown, or left by a
process that died, is claimed and resumed from its transcript through a strict provider; what
finished is never done again, a call whose outcome is unknown is repeated only when its tool is
safe to repeat. Real processes and signals: tests/test_shutdown.py and tests/scaleout/."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync
from django.db import connections
from django.test import AsyncClient
from django.urls import reverse
from django.utils import timezone

from chat import agent, inspector
from chat.models import Conversation, Message, ProviderProfile, Run, RunLease, ToolCall
from chat.runs import leases, resume, tasks
from chat.testing import factories as make
from chat.testing.openai_script import MODEL, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)

DEAD = f"{socket.gethostname()}:999999999:dead"
"""A worker on this host whose pid is not alive: a process that was killed."""


@pytest.fixture(autouse=True)
def quick(settings: Any) -> AsyncIterator[None]:
    settings.AGENTLAB_CHECKPOINT_SECONDS = 0.1
    yield
    tasks.stopping.clear()


@pytest.fixture
def tool_runs() -> AsyncIterator[tuple[Counter[str], asyncio.Event]]:
    """Two tools of this test: `write_note` writes (not safe to repeat; the conversations of
    `on_provider` run it without asking), `read_page` only reads; both wait for the event the
    first time they run, and count their runs."""
    counted: Counter[str] = Counter()
    gate = asyncio.Event()

    def tool(name: str) -> Callable[[dict[str, Any]], Awaitable[str]]:
        async def handler(arguments: dict[str, Any]) -> str:
            counted[name] += 1
            if counted[name] == 1:
                await gate.wait()
            return f"{name} done"

        return handler

    for name, read_only in (("write_note", False), ("read_page", True)):
        definition = agent.ToolDefinition(name=name, description=name)
        agent.default_registry.register(definition, tool(name), read_only=read_only)
    yield counted, gate
    agent.default_registry.unregister("write_note")
    agent.default_registry.unregister("read_page")


@sync
def on_provider(fake: FakeOpenAIServer, *tools: str) -> Conversation:
    made = make.conversation(
        make.user("ada"),
        "Resumable",
        enabled_tools=list(tools),
        tool_policies={"write_note": "run"},  # these runs are about resuming, not approvals
    )
    made.profile = ProviderProfile.objects.create(
        name="fake", base_url=fake.base_url, model=MODEL, available_to_everyone=True
    )
    made.save()
    return made


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    async with asyncio.timeout(10):
        while not await check():  # noqa: ASYNC110 (the state is in the database)
            await asyncio.sleep(0.02)


async def killed(handle: Any) -> None:
    """The run's process dies: its task ends without writing a thing, its row names a
    process whose pid is gone, its lease expired."""
    tasks.RUNS.lost.add(handle.run.pk)
    handle.task.cancel()
    await asyncio.wait([handle.task])
    await Run.objects.filter(pk=handle.run.pk).aupdate(
        worker=DEAD, lease_expires_at=timezone.now() - timedelta(seconds=1)
    )


async def resumed() -> Run:
    (task,) = await resume.sweep()
    finished = await task
    await finished.arefresh_from_db()
    return finished


def tool_replies(fake: FakeOpenAIServer, request: int) -> dict[str, str]:
    messages = fake.requests[request].body["messages"]
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


async def test_a_run_let_go_mid_tool_at_a_shutdown_is_finished_by_the_next_process(
    fake_openai: FakeOpenAIServer, tool_runs: Any
) -> None:
    counted, _ = tool_runs
    made = await on_provider(fake_openai, "get_current_time", "write_note")
    fake_openai.enqueue(
        tool_turn([("t", "get_current_time", "{}"), ("w", "write_note", '{"note": "x"}')]),
        text_turn("Noted, and the time is known."),
    )
    handle = await make.start_as_owner(made, "note it and tell me the time")
    finished_call = ToolCall.objects.filter(call_id="t", status="completed")
    await until(finished_call.aexists)

    assert await tasks.wind_up(1) == 1  # write_note never returns: mid-step at the end
    run = await Run.objects.aget(pk=handle.run.pk)
    assert (run.status, run.worker) == ("in_progress", "")
    tasks.stopping.clear()  # the next process

    finished = await resumed()

    assert (finished.status, finished.resumes) == ("completed", 1)
    assert len(fake_openai.requests) == 2 and fake_openai.pending == 0
    replies = tool_replies(fake_openai, 1)
    assert json.loads(replies["t"])["timezone"] == "UTC"  # its result kept, not run again
    assert json.loads(replies["w"]) == {"error": f"{resume.NOT_REPEATED}: write_note"}
    assert counted["write_note"] == 1  # the write is never repeated
    note = await ToolCall.objects.aget(run=run, call_id="w")
    assert (note.status, note.failure, note.error) == ("failed", "interrupted", resume.NOT_REPEATED)
    history = await make.ahistory(made)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
    assert history[-1].content == "Noted, and the time is known."
    assert agent.history.validate(history) == []
    ends = [lease.outcome async for lease in RunLease.objects.filter(run=run).order_by("pk")]
    assert ends == ["released", "finished"]


async def test_a_read_only_call_in_flight_when_the_process_died_is_run_again(
    fake_openai: FakeOpenAIServer, tool_runs: Any
) -> None:
    counted, gate = tool_runs
    made = await on_provider(fake_openai, "read_page")
    fake_openai.enqueue(tool_turn([("r", "read_page", "{}")]), text_turn("Read."))
    handle = await make.start_as_owner(made, "read the page")
    await until(lambda: asyncio.sleep(0, counted["read_page"] == 1))
    await killed(handle)
    gate.set()

    finished = await resumed()

    assert finished.status == "completed" and counted["read_page"] == 2
    assert tool_replies(fake_openai, 1) == {"r": "read_page done"}
    call = await ToolCall.objects.aget(run=finished)
    assert (call.status, call.result) == ("completed", "read_page done")

    # The waterfall shows the time no process held the run, and who resumed it.
    picture = await sync(lambda: str(inspector.picture(finished, inspector.steps(finished))))()
    assert "resumed 1 time" in picture
    assert f"resumed by {':'.join(tasks.WORKER_ID.split(':')[:2])}" in picture
    assert "expired (the process died or stalled" in picture

    # The admin lists the run's leases: the process that died, then this one.
    staff = AsyncClient()
    await staff.aforce_login(await sync(make.user)("root", is_staff=True, is_superuser=True))
    page = (await staff.get(reverse("admin:chat_run_change", args=[finished.pk]))).content
    assert b"leases (the processes that executed the run)" in page.lower()
    assert page.count(tasks.WORKER_ID.encode()) >= 2  # the process that died, this one
    assert b"Expired (the process died or stalled" in page and b"Run finished" in page


async def test_the_turn_that_was_streaming_is_requested_again_in_place_of_its_draft(
    fake_openai: FakeOpenAIServer,
) -> None:
    made = await on_provider(fake_openai)
    story = " ".join(f"word{n}" for n in range(400))
    fake_openai.enqueue(text_turn(story).but(chunk_delay=0.01))
    handle = await make.start_as_owner(made, "tell me a story")
    draft = Message.objects.filter(conversation=made, role="assistant")
    await until(lambda: draft.filter(content__startswith="word0 word1").aexists())
    await killed(handle)
    kept = await draft.aget()
    fake_openai.enqueue(text_turn("A shorter story, told again."))

    finished = await resumed()

    assert finished.status == "completed"
    again = fake_openai.requests[1].body["messages"]
    assert [m["role"] for m in again] == ["user"]  # the draft is not sent as history
    reply = await draft.aget()
    assert reply.pk == kept.pk and reply.content == "A shorter story, told again."
    assert await Message.objects.filter(conversation=made).acount() == 2


async def test_a_turn_whose_calls_had_not_started_runs_them_all_after_a_shutdown(
    fake_openai: FakeOpenAIServer, tool_runs: Any
) -> None:
    counted, gate = tool_runs
    gate.set()
    made = await on_provider(fake_openai, "write_note")
    fake_openai.enqueue(
        tool_turn([("w", "write_note", '{"note": "x"}')]).but(chunk_delay=0.2),
        text_turn("Written."),
    )
    handle = await make.start_as_owner(made, "write it")
    await asyncio.sleep(0.3)
    tasks.stopping.set()  # mid-turn: the run pauses once the turn is in, before its calls
    await asyncio.wait_for(handle.task, 10)
    call = await ToolCall.objects.aget(run=handle.run)
    assert (call.status, call.started_at) == ("in_progress", None) and counted["write_note"] == 0
    tasks.stopping.clear()

    finished = await resumed()

    assert finished.status == "completed" and counted["write_note"] == 1
    assert tool_replies(fake_openai, 1) == {"w": "write_note done"}


async def test_a_run_resumed_more_than_max_resumes_times_fails_saying_so(
    settings: Any,
) -> None:
    made = await sync(make.conversation)(await sync(make.user)("ada"))
    run = await sync(make.crashed_run)(made, DEAD)
    await Run.objects.filter(pk=run.pk).aupdate(resumes=settings.AGENTLAB_MAX_RESUMES)

    assert await resume.sweep() == []

    await run.arefresh_from_db()
    assert run.status == "failed" and run.resumes == settings.AGENTLAB_MAX_RESUMES + 1
    assert run.error == (
        "Stopped: the run was resumed 3 times and its process stopped each time "
        "(AGENTLAB_MAX_RESUMES is 3)."
    )
    history = await make.ahistory(made)
    assert agent.history.validate(history) == [] and history[-1].role == "tool"


async def test_of_processes_racing_to_claim_one_run_exactly_one_wins() -> None:
    made = await sync(make.conversation)(await sync(make.user)("ada"))
    run = await sync(make.crashed_run)(made, DEAD)
    wins: list[bool] = []
    start = threading.Barrier(8)

    def claimer() -> None:
        try:
            row = Run.objects.get(pk=run.pk)
            start.wait()
            wins.append(leases.claim(row))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer) for _ in range(8)]
    await asyncio.to_thread(lambda: [t.start() for t in threads] and [t.join() for t in threads])

    assert sorted(wins) == [False] * 7 + [True]
    await run.arefresh_from_db()
    assert (run.worker, run.resumes) == (tasks.WORKER_ID, 1)
    tasks.RUNS.starting.discard(run.pk)


async def test_a_process_whose_run_was_taken_over_stops_it_without_writing(
    fake_openai: FakeOpenAIServer, tool_runs: Any, settings: Any
) -> None:
    settings.AGENTLAB_HEARTBEAT_SECONDS = 0.05
    counted, _ = tool_runs
    made = await on_provider(fake_openai, "write_note")
    fake_openai.enqueue(tool_turn([("w", "write_note", "{}")]))
    handle = await make.start_as_owner(made, "write it")
    await until(lambda: asyncio.sleep(0, counted["write_note"] == 1))
    await Run.objects.filter(pk=handle.run.pk).aupdate(worker="elsewhere:1:other")

    await asyncio.wait([handle.task], timeout=5)

    assert handle.task.cancelled()
    run = await Run.objects.aget(pk=handle.run.pk)
    assert (run.status, run.worker) == ("in_progress", "elsewhere:1:other")
    assert (await ToolCall.objects.aget(run=run)).status == "in_progress"
