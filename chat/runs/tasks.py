"""The long tasks of this process, runs and evaluations alike: which execute here, their
heartbeats, Stop and catch-up from any process, and which rows a dead process left in progress.

Every kind of long task is a TaskKind over a model with `worker`, `heartbeat_at`, `started_at`
and an `in_progress()` QuerySet method. A task holds its row for as long as it executes
(`TaskKind.hold`): a heartbeat tells other processes it is alive, and a listener on its control
group takes requests from sockets and views in any process.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from datetime import datetime, timedelta
from typing import Any, Protocol

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import DatabaseError, models
from django.utils import timezone

from chat.models import EvalRun, Run

logger = logging.getLogger(__name__)

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
STALE_AFTER = timedelta(seconds=60)
"""A row without a lease (from before leases) whose process has shown no sign of life for this
long is taken as dead."""
SAVE_SECONDS = 2.0
"""Of a shutdown's grace, what runs still mid-step keep to save what streamed."""
CANCEL = "task.cancel"
"""The control message that stops a task, whichever process executes it."""

stopping = threading.Event()
"""Set once this process is shutting down: it takes no new task, and its tasks are interrupted."""
background: set[asyncio.Task[object]] = set()
"""Tasks of this process that no long task waits for (title requests, a comparison's outer
task): kept here so that they are not collected mid-way; a stopping process cancels them."""

ControlHandler = Callable[[dict[str, Any]], Awaitable[None]]


class Held(Protocol):
    """A row a long task holds while it executes."""

    pk: Any
    worker: str
    heartbeat_at: datetime | None
    lease_expires_at: datetime | None
    started_at: datetime


def lease() -> timedelta:
    return timedelta(seconds=settings.AGENTLAB_LEASE_SECONDS)


def process_gone(worker: str, heartbeat: datetime, expires: datetime | None = None) -> bool:
    """Whether another process (`host:pid:boot`) no longer holds its row: it released it, its
    pid is not alive on this host, or its lease expired (without one: no sign of life since
    STALE_AFTER)."""
    if not worker:
        return True
    host, _, rest = worker.partition(":")
    pid = rest.partition(":")[0]
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
    if expires is not None:
        return expires < timezone.now()
    return heartbeat < timezone.now() - STALE_AFTER


class TaskKind[M: models.Model]:
    """One kind of long task (runs, evaluations): the tasks of it executing in this process,
    by the pk of their row, and the rules every kind shares."""

    def __init__(self, name: str, model: type[M]) -> None:
        self.name = name
        self.model = model
        self.running: dict[int, asyncio.Task[Any]] = {}
        self.lost: set[int] = set()
        """Rows another process took over while this one executed them: their tasks stop
        without writing."""
        self.starting: set[int] = set()
        """Rows this process has created whose task is not registered yet: alive, not dead.

        A row is created in a worker thread and its task registered once the event loop
        resumes; in between, this process must not take it for the row of a dead process."""

    def in_progress(self) -> models.QuerySet[M]:
        return self.model._default_manager.in_progress()  # type: ignore[attr-defined,no-any-return]

    def register(self, pk: int, task: asyncio.Task[Any]) -> None:
        """Count `task` as executing the row `pk` here until it is done."""
        self.running[pk] = task
        self.starting.discard(pk)

        def done(_: asyncio.Task[Any]) -> None:
            if self.running.get(pk) is task:
                del self.running[pk]

        task.add_done_callback(done)

    def cancel(self, pk: int) -> bool:
        """Cancel the task of row `pk` in this process; False when it does not execute here."""
        task = self.running.get(pk)
        if task is None or task.done():
            return False
        task.cancel()
        return True

    def is_dead(self, row: Held) -> bool:
        """Whether the process executing an in-progress row is gone."""
        if row.pk in self.running or row.pk in self.starting or row.worker == WORKER_ID:
            return row.pk not in self.running and row.pk not in self.starting
        return process_gone(row.worker, row.heartbeat_at or row.started_at, row.lease_expires_at)

    def left_behind(self) -> Iterator[M]:
        """In-progress rows whose process is gone."""
        for row in self.in_progress():
            if self.is_dead(row):  # type: ignore[arg-type]
                yield row

    async def beat(self, pk: int) -> None:
        """Renew the lease on row `pk` now and then, so other processes do not take the task
        for a dead one. Should another process have claimed it (this one stalled past its
        lease), the task here stops without writing: it is `lost`."""
        while True:
            await asyncio.sleep(settings.AGENTLAB_HEARTBEAT_SECONDS)
            now = timezone.now()
            rows = self.in_progress().filter(pk=pk)
            try:
                held = await rows.filter(worker=WORKER_ID).aupdate(
                    heartbeat_at=now, lease_expires_at=now + lease()
                )
                taken = not held and await rows.aexists()
            except DatabaseError as exc:  # the next beat tries again, within the lease
                logger.warning("%s %s: lease not renewed: %s", self.name, pk, exc)
                continue
            if taken:
                logger.warning("%s %s: another process took it over; it stops here", self.name, pk)
                self.lost.add(pk)
                self.cancel(pk)
            if not held:
                return

    def claim(self, row: Held, **changes: Any) -> bool:
        """Take over a row whose process is gone: one atomic update that only the first of
        any number of claimers wins (it still names the worker and lease they all read)."""
        now = timezone.now()
        won = (
            self.in_progress()
            .filter(pk=row.pk, worker=row.worker, lease_expires_at=row.lease_expires_at)
            .update(worker=WORKER_ID, heartbeat_at=now, lease_expires_at=now + lease(), **changes)
        )
        if won:
            self.starting.add(row.pk)
        return bool(won)

    def release(self, pk: int) -> bool:
        """Let go of row `pk` at once (this process is stopping): another process may claim it
        without waiting for the lease to expire."""
        now = timezone.now()
        rows = self.in_progress().filter(pk=pk, worker=WORKER_ID)
        return bool(rows.update(worker="", lease_expires_at=now))

    def control_group(self, key: int) -> str:
        """The group the task keyed `key` listens on (a run's key is its conversation: one run
        at a time per conversation, and the socket knows the conversation, not the run)."""
        return f"{self.name}-control.{key}"

    async def request(self, key: int, message: dict[str, Any]) -> None:
        """Send a control message to the task keyed `key`, whichever process executes it."""
        layer = get_channel_layer()
        if layer is not None:
            await layer.group_send(self.control_group(key), message)

    async def request_cancel(self, key: int) -> None:
        await self.request(key, {"type": CANCEL})

    async def listen(
        self, key: int, task: asyncio.Task[Any], handle: ControlHandler | None = None
    ) -> None:
        """Take control messages for `task` until cancelled: CANCEL cancels it, anything else
        goes to `handle`."""
        layer = get_channel_layer()
        if layer is None:
            return
        channel = await layer.new_channel()
        group = self.control_group(key)
        await layer.group_add(group, channel)
        try:
            while True:
                # No timeout on this read: Redis pub/sub unsubscribes a channel whose receive is
                # cancelled, and drops what is sent to it until the next receive. Cancelling it
                # is how the channel ends, with the task.
                message = await layer.receive(channel)
                if message.get("type") == CANCEL:
                    if not task.cancelling():
                        task.cancel()
                elif handle is not None:
                    try:
                        await handle(message)
                    except Exception:
                        logger.exception("%s %s: a control message failed", self.name, key)
        finally:
            await asyncio.shield(layer.group_discard(group, channel))

    def hold(self, pk: int, key: int, handle: ControlHandler | None = None) -> Callable[[], None]:
        """From now on the current task holds row `pk`: registered here, its heartbeat beating,
        its control group (keyed `key`) listened to. Call the returned function when it ends."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a long task runs in an asyncio task")
        if self.running.get(pk) is not task:
            self.register(pk, task)
        helpers = [
            asyncio.create_task(self.beat(pk)),
            asyncio.create_task(self.listen(key, task, handle)),
        ]

        def release() -> None:
            for helper in helpers:
                helper.cancel()

        return release

    def recover(self, interrupt: Callable[[M], bool]) -> list[M]:
        """Interrupt every row a dead process left in progress; returns those this call
        claimed (`interrupt` says whether it did: another process may get there first)."""
        recovered = []
        for row in list(self.left_behind()):
            if interrupt(row):
                recovered.append(row)
        return recovered


RUNS = TaskKind("run", Run)
EVALUATIONS = TaskKind("eval", EvalRun)
KINDS: tuple[TaskKind[Any], ...] = (RUNS, EVALUATIONS)


def launch(work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """Start work as a task of this process, not tied to the request that asked for it: a fresh
    context (not the request's thread executor, gone once the response is sent), kept in
    `background` so that it is not collected and a stopping process cancels it."""
    task = asyncio.create_task(work, context=contextvars.Context())
    background.add(task)
    task.add_done_callback(background.discard)
    return task


async def wind_up(grace: float) -> int:
    """Stop taking tasks and wind up every long task executing here within `grace` seconds.

    Runs first get the time to reach their next step boundary, where they pause and let go of
    their lease (another process resumes them); those still mid-step are then cancelled: they
    save what streamed and let go the same way. Evaluations are cancelled at once: they let go
    too, and another process makes their remaining attempts; background tasks are cancelled,
    not waited for. Returns how many long tasks were wound up.
    """
    stopping.set()
    for pending in background:
        pending.cancel()
    evaluations = [task for task in EVALUATIONS.running.values() if not task.done()]
    for task in evaluations:
        task.cancel()
    runs = [task for task in RUNS.running.values() if not task.done()]
    tasks = [*runs, *evaluations]
    if not tasks:
        return 0
    started = asyncio.get_running_loop().time()
    drain = max(grace - SAVE_SECONDS, grace / 2)
    _, mid_step = await asyncio.wait(runs, timeout=drain) if runs else (set(), set())
    for task in mid_step:
        task.cancel()
    left = max(0.0, grace - (asyncio.get_running_loop().time() - started))
    await asyncio.wait(tasks, timeout=left)
    logger.warning(
        "shutdown: %d run(s) paused or saved to resume elsewhere (%d mid-step), %d evaluation(s)"
        " let go",
        len(runs),
        len(mid_step),
        len(evaluations),
    )
    return len(tasks)
