"""Evaluations that outlive their process: one whose process stopped or died is claimed by
another (the lease rule of `runs.tasks`, as for runs) and makes the attempts that have no
result yet; its replays that were under way are interrupted and made again (a replay runs no
real tool: it is safe to repeat)."""

from __future__ import annotations

import asyncio
import contextvars
import logging

from channels.db import database_sync_to_async as sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from chat.agent.http import display_url
from chat.models import Case, EvalRun, EvalStatus
from chat.runs import RunRefused, liveness
from chat.runs.tasks import EVALUATIONS, stopping

from . import lifecycle, replay

logger = logging.getLogger(__name__)

NOT_RESUMED = "Interrupted: the server process stopped during the evaluation, and {why}."


def claimable() -> list[EvalRun]:
    return [row for row in EVALUATIONS.in_progress() if EVALUATIONS.is_dead(row)]


@transaction.atomic
def claim(row: EvalRun) -> bool:
    return EVALUATIONS.claim(row, resumes=F("resumes") + 1)


def give_up(eval_run: EvalRun, why: str) -> None:
    EvalRun.objects.in_progress().filter(pk=eval_run.pk).update(
        status=EvalStatus.INTERRUPTED,
        error=NOT_RESUMED.format(why=why),
        finished_at=timezone.now(),
    )


def rebuilt(eval_run: EvalRun) -> tuple[replay.Target, list[Case], list[tuple[Case, int]]] | str:
    """What a claimed evaluation goes on with: its target, cases and the attempts still to
    make; or why it cannot go on."""
    if eval_run.resumes > settings.AGENTLAB_MAX_RESUMES:
        return f"it was resumed {eval_run.resumes - 1} times (AGENTLAB_MAX_RESUMES)"
    if eval_run.started_by is None:
        return "it was started from a terminal"
    try:
        if eval_run.agent_version is not None:
            chosen = replay.target(version=eval_run.agent_version)
        else:
            chosen = replay.target(profile=eval_run.profile, model=eval_run.model or None)
    except RunRefused as exc:
        return f"its endpoint is not usable here ({exc})"
    if display_url(chosen.endpoint.base_url)[:500] != eval_run.base_url:
        return "its endpoint was a terminal's own"
    by_pk = Case.objects.in_bulk(eval_run.case_ids)
    cases = [by_pk[pk] for pk in eval_run.case_ids if pk in by_pk]
    done = set(eval_run.results.values_list("case_id", "attempt"))
    todo = [
        (case, n)
        for case in cases
        for n in range(1, eval_run.repeat + 1)
        if (case.pk, n) not in done
    ]
    return chosen, cases, todo


async def sweep() -> list[asyncio.Task[EvalRun]]:
    """Claim and resume every evaluation whose process no longer holds it."""
    if stopping.is_set():
        return []
    # Replays a dead process left: interrupted (their attempts are made again below).
    await sync_to_async(liveness.recover_interrupted_runs)(evaluations_only=True)
    started = []
    for row in await sync_to_async(claimable)():
        if not row.case_ids:  # from before evaluations resumed: not resumable
            await sync_to_async(give_up)(row, "it predates resuming")
            continue
        if stopping.is_set() or not await sync_to_async(claim)(row):
            continue
        eval_run = await EvalRun.objects.select_related(
            "profile", "agent_version", "started_by"
        ).aget(pk=row.pk)
        plan = await sync_to_async(rebuilt)(eval_run)
        if isinstance(plan, str):
            await sync_to_async(give_up)(eval_run, plan)
            EVALUATIONS.starting.discard(eval_run.pk)
            continue
        chosen, cases, todo = plan
        work = lifecycle.watched(eval_run, cases, chosen, user=eval_run.started_by, attempts=todo)
        task = asyncio.create_task(work, context=contextvars.Context())
        EVALUATIONS.register(eval_run.pk, task)
        logger.warning("evaluation %s resumed here: %d attempt(s) to make", eval_run.pk, len(todo))
        started.append(task)
    return started
