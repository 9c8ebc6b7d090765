"""Start and stop evaluations and comparisons from a page: their work is a long task of this
process (`runs.tasks`), its pages told of every result and of its end."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from chat.evals import compare, replay
from chat.evals.fragments import Publisher, publish_comparison_end
from chat.models import Case, Comparison, EvalRun
from chat.runs import tasks

logger = logging.getLogger(__name__)

Concluding = Callable[[EvalRun], Awaitable[None]]


async def request_stop(eval_run_id: int) -> None:
    """Stop an evaluation, whichever process replays it."""
    await tasks.EVALUATIONS.request_cancel(eval_run_id)


async def watched(
    eval_run: EvalRun,
    cases: Sequence[Case],
    target: replay.Target,
    *,
    user: Any,
    lock: asyncio.Lock | None = None,
    concluding: Concluding | None = None,
    attempts: Sequence[tuple[Case, int]] | None = None,
) -> EvalRun:
    """`replay.run_eval` with its pages told of every result and of its end; `concluding`
    runs once it has ended (stopped too), before its end is told."""
    publisher = Publisher(eval_run, lock)
    try:
        return await replay.run_eval(
            eval_run, cases, target, user=user, listeners=[publisher], attempts=attempts
        )
    finally:
        try:
            if concluding is not None:
                await asyncio.shield(concluding(eval_run))
        except Exception:
            logger.exception("eval %s: its conclusion failed", eval_run.pk)
        try:
            await asyncio.shield(publisher.finished())
        except Exception:
            logger.exception("eval %s: the end was not published", eval_run.pk)


def start_eval(
    eval_run: EvalRun, cases: Sequence[Case], target: replay.Target, *, user: Any
) -> asyncio.Task[Any]:
    return tasks.launch(watched(eval_run, cases, target, user=user))


def start_comparison(
    comparison: Comparison,
    eval_runs: Sequence[EvalRun],
    targets: Sequence[replay.Target],
    cases: Sequence[Case],
    *,
    user: Any,
) -> asyncio.Task[Any]:
    async def work() -> None:
        lock = asyncio.Lock()

        async def one(eval_run: EvalRun, target: replay.Target) -> EvalRun:
            return await watched(eval_run, cases, target, user=user, lock=lock)

        try:
            await compare.run_comparison(eval_runs, targets, cases, user=user, replay_one=one)
        finally:
            try:
                await asyncio.shield(publish_comparison_end(comparison.pk))
            except Exception:
                logger.exception("comparison %s: the end was not published", comparison.pk)

    return tasks.launch(work())
