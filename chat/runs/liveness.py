"""Runs whose process died: interrupted, their dangling tool calls answered (the machinery that
tells a live run from a dead one is `tasks`, shared with evaluations)."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from chat import transcripts
from chat.models import Purpose, Run, RunStatus, ToolCall, ToolCallStatus

from .tasks import RUNS, stopping, wind_up

logger = logging.getLogger(__name__)

INTERRUPTED = "Interrupted: the server process stopped during the run."
CANCELLED = "Cancelled by the user."


def stopped() -> tuple[str, str]:
    """The status and reason of a run whose task was cancelled: interrupted while this process
    stops, else cancelled (Stop)."""
    if stopping.is_set():
        return RunStatus.INTERRUPTED, INTERRUPTED
    return RunStatus.CANCELLED, CANCELLED


@transaction.atomic
def interrupt(run: Run) -> bool:
    """Mark a run whose process died as interrupted and repair its conversation's history;
    False when another process got there first."""
    return end(run, RunStatus.INTERRUPTED, INTERRUPTED)


@transaction.atomic
def end(run: Run, status: str, reason: str, *, held_by: str | None = None) -> bool:
    """End a run no task executes (held by `held_by`, when given; or one waiting for
    approval) with `status` and `reason`: its unfinished tool calls failed (cancelled, when it
    is), its conversation's history repaired. False when it is no longer in progress or
    waiting (another process got there first)."""
    rows = Run.objects.active().filter(pk=run.pk)
    if held_by is not None:
        rows = rows.filter(worker=held_by)
    if not rows.update(status=status):
        return False
    run.status, run.error, run.finished_at = status, reason, timezone.now()
    run.save(update_fields=["status", "error", "finished_at"])
    cancelled = status == RunStatus.CANCELLED
    ToolCall.objects.filter(run=run).in_progress().update(
        status=ToolCallStatus.CANCELLED if cancelled else ToolCallStatus.FAILED,
        error=reason,
        finished_at=run.finished_at,
    )
    transcripts.repair_conversation(run.conversation, reason=reason.rstrip("."), run=run)
    return True


async def wind_up_all(grace: float) -> int:
    """Stop taking runs and evaluations, interrupt every one of this process, and wait for their
    wind-up (see `tasks.wind_up`): each run saves what streamed and answers its unanswered tool
    calls as on Stop, but ends `interrupted`."""
    return await wind_up(grace)


def recover_interrupted_runs(*, evaluations_only: bool = False) -> list[Run]:
    """Interrupt every in-progress run whose process is gone (with `evaluations_only`, those
    of evaluations: a server resumes the others, see `resume`); returns them."""

    def unless_chat(run: Run) -> bool:
        return run.conversation.purpose != Purpose.CHAT and interrupt(run)

    recovered = RUNS.recover(unless_chat if evaluations_only else interrupt)
    for run in recovered:
        logger.warning("run %s of conversation %s interrupted", run.pk, run.conversation_id)
    return recovered
