"""Which runs are alive: this process's tasks, heartbeats, and the repair of runs whose process
died (interrupted, their dangling tool calls answered)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import uuid
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from chat import transcripts
from chat.models import Run, RunStatus, ToolCall, ToolCallStatus

logger = logging.getLogger(__name__)

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
HEARTBEAT_INTERVAL = 10.0
# A run whose process has not shown a sign of life for this long is taken as dead.
STALE_AFTER = timedelta(seconds=60)
INTERRUPTED = "Interrupted: the server process stopped during the run."
running: dict[int, asyncio.Task[Run]] = {}
"""The runs executing in this process, by id."""
stopping = threading.Event()
"""Set once this process is shutting down: it takes no new run, and its runs are interrupted."""
background: set[asyncio.Task[object]] = set()
"""Tasks of this process that no run waits for (title requests): kept here so that they are
not collected mid-way; a stopping process cancels them and does not wait."""
starting: set[int] = set()
"""Runs this process has created whose task is not registered yet: alive, not dead.

A run is created in a worker thread and registered in `running` once the event loop resumes;
in between, another sender of this process must not take it for the run of a dead process."""


async def beat(run_id: int) -> None:
    """Tell other processes this run is alive, so they do not take it for a crashed one."""
    while True:
        await asyncio.sleep(HEARTBEAT_INTERVAL)
        await Run.objects.in_progress().filter(pk=run_id).aupdate(heartbeat_at=timezone.now())


def is_dead(run: Run) -> bool:
    """Whether the process executing an in-progress run is gone."""
    if run.pk in running or run.pk in starting or run.worker == WORKER_ID:
        return run.pk not in running and run.pk not in starting
    return process_gone(run.worker, run.heartbeat_at or run.started_at)


def process_gone(worker: str, heartbeat: datetime) -> bool:
    """Whether another process (`host:pid:boot`) is gone: its pid is not alive on this host,
    or it has shown no sign of life since STALE_AFTER."""
    host, _, rest = worker.partition(":")
    pid = rest.partition(":")[0]
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
    return heartbeat < timezone.now() - STALE_AFTER


@transaction.atomic
def interrupt(run: Run) -> None:
    """Mark a run whose process died as interrupted and repair its conversation's history."""
    claimed = Run.objects.in_progress().filter(pk=run.pk).update(status=RunStatus.INTERRUPTED)
    if not claimed:
        return  # another process got there first
    run.status = RunStatus.INTERRUPTED
    run.error = INTERRUPTED
    run.finished_at = timezone.now()
    run.save(update_fields=["status", "error", "finished_at"])
    ToolCall.objects.filter(run=run).in_progress().update(
        status=ToolCallStatus.FAILED, error=INTERRUPTED, finished_at=timezone.now()
    )
    transcripts.repair_conversation(run.conversation, reason=INTERRUPTED.rstrip("."), run=run)


async def wind_up_all(grace: float) -> int:
    """Stop taking runs, interrupt every run of this process, and wait for their wind-up.

    Each run saves what streamed and answers its unanswered tool calls as on Stop, but ends
    `interrupted`; `grace` seconds bound the wait. Returns how many runs were wound up.
    Background tasks are cancelled, not waited for.
    """
    stopping.set()
    for pending in background:
        pending.cancel()
    tasks = [task for task in running.values() if not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=grace)
        logger.warning("shutdown: %d run(s) interrupted and saved", len(tasks))
    return len(tasks)


def recover_interrupted_runs() -> list[Run]:
    """Interrupt every in-progress run whose process is gone; returns them."""
    recovered = []
    for run in Run.objects.in_progress().select_related("conversation"):
        if is_dead(run):
            interrupt(run)
            recovered.append(run)
            logger.warning("run %s of conversation %s interrupted", run.pk, run.conversation_id)
    return recovered
