"""Evaluations that outlive their process: claimed by another and finished with the attempts
that had no result yet; what cannot be resumed ends interrupted, saying why."""

from __future__ import annotations

import asyncio
import socket
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync
from django.test import override_settings
from django.utils import timezone

from chat.evals import replay
from chat.evals import resume as evals_resume
from chat.models import EvalRun, Run
from chat.runs import tasks
from chat.testing import evals as made_for
from chat.testing import factories as make

pytestmark = pytest.mark.django_db(transaction=True)

DEAD = f"{socket.gethostname()}:999999999:dead"


@pytest.fixture
def case() -> Any:
    return made_for.search_case(make.user("ada"))


@pytest.fixture(autouse=True)
def not_stopping() -> Any:
    yield
    tasks.stopping.clear()


def died(eval_run: EvalRun, **changes: Any) -> None:
    EvalRun.objects.filter(pk=eval_run.pk).update(
        worker=DEAD, lease_expires_at=timezone.now() - timedelta(seconds=1), **changes
    )


async def resumed() -> EvalRun:
    (task,) = await evals_resume.sweep()
    eval_run = await task
    await eval_run.arefresh_from_db()
    return eval_run


async def test_an_evaluation_whose_process_died_makes_only_the_attempts_left(case: Any) -> None:
    owner = await sync(lambda: case.conversation.owner)()
    eval_run = await sync(replay.create_eval_run)([case], replay.target(), user=owner, repeat=3)
    first = await replay.replay(case, eval_run, replay.target(), user=owner, attempt=1)
    await sync(died)(eval_run)

    finished = await resumed()

    assert (finished.status, finished.resumes, finished.total) == ("completed", 1, 3)
    attempts = sorted([r.attempt async for r in finished.results.all()])
    assert attempts == [1, 2, 3]  # attempt 1 was not made again
    assert finished.passed + finished.failed == 3
    assert await finished.results.filter(attempt=1).acount() == 1
    assert (await finished.results.aget(attempt=1)).pk == first.pk


async def test_an_evaluation_let_go_at_a_shutdown_is_finished_by_the_next_process(
    case: Any,
) -> None:
    owner = await sync(lambda: case.conversation.owner)()
    chosen = replay.target()
    with override_settings(AGENTLAB_SCRIPTED_DELAY=0.2):
        eval_run = await sync(replay.create_eval_run)([case], chosen, user=owner, repeat=4)
        evaluation = tasks.launch(replay.run_eval(eval_run, [case], chosen, user=owner))
        replays = Run.objects.filter(conversation__purpose="eval", status="in_progress")
        for _ in range(250):
            if await replays.aexists():
                break
            await asyncio.sleep(0.02)
        await tasks.wind_up(2)
    assert evaluation.done()
    await eval_run.arefresh_from_db()
    assert (eval_run.status, eval_run.worker) == ("in_progress", "")
    assert not await replays.aexists()  # the replays under way ended, to be made again
    tasks.stopping.clear()

    finished = await resumed()

    assert finished.status == "completed"
    assert sorted([r.attempt async for r in finished.results.all()]) == [1, 2, 3, 4]


async def test_what_cannot_be_resumed_ends_interrupted_saying_why(case: Any) -> None:
    owner = await sync(lambda: case.conversation.owner)()
    old = await sync(replay.create_eval_run)([case], replay.target(), user=owner)
    await sync(died)(old, case_ids=[])
    terminal = await sync(replay.create_eval_run)([case], replay.target(), user=None)
    await sync(died)(terminal)

    assert await evals_resume.sweep() == []

    await old.arefresh_from_db()
    await terminal.arefresh_from_db()
    assert old.status == terminal.status == "interrupted"
    assert old.error.endswith("and it predates resuming.")
    assert terminal.error == (
        "Interrupted: the server process stopped during the evaluation, and it was started "
        "from a terminal."
    )
