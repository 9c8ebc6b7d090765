"""A process's hold on the runs it executes: a lease on the run row (`tasks.TaskKind`), renewed
by the heartbeat, released at once when the process stops, claimed by another process once it
has expired; each hold recorded as a RunLease (the admin lists them)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from chat.models import LeaseEnd, Run, RunLease

from .tasks import RUNS, WORKER_ID


def open_lease(run: Run) -> None:
    """Record that this process holds `run` from now on (call inside the run's transaction)."""
    RunLease.objects.create(run=run, worker=WORKER_ID, acquired_at=timezone.now())


def close_lease(run_pk: int, outcome: str) -> None:
    """Record that this process let go of the run."""
    RunLease.objects.filter(run_id=run_pk, worker=WORKER_ID, ended_at=None).update(
        ended_at=timezone.now(), outcome=outcome
    )


def release(run_pk: int) -> None:
    """Let go of a run at once (this process stops): another process resumes it now."""
    with transaction.atomic():
        if RUNS.release(run_pk):
            close_lease(run_pk, LeaseEnd.RELEASED)


@transaction.atomic
def claim(run: Run) -> bool:
    """Take over `run` from a process that is gone, or that a decision let go on (see
    `approvals`: not counted as a resumption); False when another claimer won."""
    last = RunLease.objects.filter(run=run).order_by("-acquired_at", "-id").first()
    decided = last is not None and last.outcome == LeaseEnd.WAITING
    if not RUNS.claim(run, **({} if decided else {"resumes": F("resumes") + 1})):
        return False
    now = timezone.now()
    RunLease.objects.filter(run=run, ended_at=None).update(ended_at=now, outcome=LeaseEnd.EXPIRED)
    RunLease.objects.create(run=run, worker=WORKER_ID, acquired_at=now)
    run.refresh_from_db()
    return True
