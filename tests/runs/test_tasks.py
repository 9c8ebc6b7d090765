"""Tests of chat.runs.tasks: runs and evaluations are the same kind of long task — one registry,
one heartbeat, one Stop from any process, one dead-process check, one wind-up."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync
from django.test import override_settings
from django.utils import timezone

from chat.agent.scripted import ScriptedChatClient
from chat.evals import cases, replay
from chat.models import Conversation, EvalRun, Run, RunLease
from chat.runs import tasks
from chat.testing import factories as make

pytestmark = pytest.mark.django_db(transaction=True)

ELSEWHERE = "other-host:1:x"


@pytest.fixture(autouse=True)
def _not_stopping() -> Iterator[None]:
    yield
    tasks.stopping.clear()


def a_run(worker: str, *, age: float = 0) -> Run:
    conversation = make.conversation(make.user("ada"))
    seen = timezone.now() - timedelta(seconds=age)
    return Run.objects.create(conversation=conversation, worker=worker, heartbeat_at=seen)


def an_evaluation(worker: str, *, age: float = 0) -> EvalRun:
    seen = timezone.now() - timedelta(seconds=age)
    return EvalRun.objects.create(total=1, worker=worker, heartbeat_at=seen)


KINDS = {"run": (tasks.RUNS, a_run), "evaluation": (tasks.EVALUATIONS, an_evaluation)}


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest) -> Any:
    return KINDS[request.param]


def test_one_rule_tells_a_dead_process_from_a_live_one_for_every_kind(kind: Any) -> None:
    registry, made = kind
    mine_unregistered = made(tasks.WORKER_ID)
    dead_here = made(f"{socket.gethostname()}:999999999:dead")
    alive_here = made(f"{socket.gethostname()}:{os.getpid()}:other-boot")
    stale = made(ELSEWHERE, age=3600)
    recent = made(ELSEWHERE)
    registry.starting.add(mine_starting := made(tasks.WORKER_ID).pk)
    try:
        dead = {row.pk for row in registry.left_behind()}
    finally:
        registry.starting.discard(mine_starting)
    assert dead == {mine_unregistered.pk, dead_here.pk, stale.pk}
    assert alive_here.pk not in dead and recent.pk not in dead


def test_recovery_interrupts_what_a_dead_process_left_and_only_once(kind: Any) -> None:
    registry, made = kind
    gone, kept = made(ELSEWHERE, age=3600), made(ELSEWHERE)
    claimed: list[int] = []

    def interrupt(row: Any) -> bool:
        updated = type(row).objects.in_progress().filter(pk=row.pk).update(status="interrupted")
        claimed.append(row.pk)
        return bool(updated)

    assert [row.pk for row in registry.recover(interrupt)] == [gone.pk]
    assert registry.recover(interrupt) == []
    assert claimed == [gone.pk]
    kept.refresh_from_db()
    assert kept.status == "in_progress"


async def test_a_held_task_beats_and_is_stopped_through_its_control_group(
    kind: Any, settings: Any
) -> None:
    registry, made = kind
    settings.AGENTLAB_HEARTBEAT_SECONDS = 0.05
    row = await sync(made)(tasks.WORKER_ID, age=3600)
    heard: list[str] = []
    held = asyncio.Event()

    async def handle(message: dict[str, Any]) -> None:
        heard.append(message["type"])
        if message["type"] == "test.fail":
            raise RuntimeError("a handler that fails does not end the listener")

    async def work() -> None:
        release = registry.hold(row.pk, 7000 + row.pk, handle)
        held.set()
        try:
            await asyncio.sleep(30)
        finally:
            release()

    task = asyncio.create_task(work())
    await held.wait()
    assert registry.running[row.pk] is task and not registry.is_dead(row)
    await asyncio.sleep(0.3)  # a few heartbeats; the listener has joined its group
    await registry.request(7000 + row.pk, {"type": "test.fail"})
    await registry.request(7000 + row.pk, {"type": "test.other"})
    await registry.request_cancel(7000 + row.pk)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert heard == ["test.fail", "test.other"]
    await row.arefresh_from_db()
    assert row.heartbeat_at is not None
    assert row.heartbeat_at > timezone.now() - timedelta(seconds=5)
    assert row.lease_expires_at > timezone.now()  # each beat renews the lease
    assert row.pk not in registry.running and not registry.cancel(row.pk)


@pytest.fixture
def case() -> Any:
    owner = make.user("ada")
    source = make.conversation(owner, "Pills", enabled_tools=["search_cards"])
    make.run_turn(source, "search the cards for pills", ScriptedChatClient())
    return cases.save_case(source, 0, set_name="cards", user=owner)


async def test_a_stopping_process_winds_up_its_runs_and_its_evaluations_alike(case: Any) -> None:
    """One wind-up: the evaluation lets go of its lease (its attempt's run ends interrupted,
    to be made again); the chat run, still mid-turn when the grace for reaching a step
    boundary is over, saves what streamed and lets go of its lease, in progress. Another
    process resumes both."""
    owner = await sync(lambda: case.conversation.owner)()
    chosen = replay.target()
    with override_settings(AGENTLAB_SCRIPTED_DELAY=0.2):
        eval_run = await sync(replay.create_eval_run)([case], chosen, user=owner, repeat=4)
        evaluation = tasks.launch(replay.run_eval(eval_run, [case], chosen, user=owner))
        chat = await sync(make.conversation)(owner, "Story")
        slow = ScriptedChatClient(["word " * 200], delay=0.05)
        handle = await make.start_as_owner(chat, "tell me a story", slow)
        for _ in range(250):
            if (
                eval_run.pk in tasks.EVALUATIONS.running
                and await Run.objects.filter(
                    conversation__purpose="eval", status="in_progress"
                ).aexists()
            ):
                break
            await asyncio.sleep(0.02)

        assert await tasks.wind_up(4) >= 2

    assert handle.task.done() and evaluation.done()
    await eval_run.arefresh_from_db()
    run = await Run.objects.aget(pk=handle.run.pk)
    assert (eval_run.status, eval_run.worker) == ("in_progress", "")
    assert (run.status, run.worker) == ("in_progress", "")  # released, to resume elsewhere
    assert run.lease_expires_at <= timezone.now()
    draft = await chat.messages.filter(role="assistant").aget()
    assert draft.content.startswith("word word")  # what streamed is kept
    lease = await RunLease.objects.aget(run=run)
    assert lease.outcome == "released" and lease.ended_at is not None
    attempts = Run.objects.filter(conversation__purpose="eval")
    assert await attempts.aexists()
    assert not await attempts.filter(status="in_progress").aexists()
    assert not tasks.RUNS.running and not tasks.EVALUATIONS.running
    assert await Conversation.objects.filter(pk=chat.pk).aexists()
