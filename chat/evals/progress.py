"""Live progress of evaluations: each finished attempt becomes fragments for the pages watching
it (its own page, and its comparison's matrix), pushed through the channel layer to the
consumer those pages connect; and the control channel through which Stop reaches the process
replaying it.

The pages are rendered from the database with the same partials. Every fragment replaces an
element by its id, so a frame that arrives twice (the catch-up sent on connect, then a push
already in flight) changes nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from autobahn.exception import Disconnected
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from django.template.loader import render_to_string

from chat.evals import compare, replay
from chat.models import Case, Comparison, EvalResult, EvalRun, EvalStatus
from chat.runs import liveness

logger = logging.getLogger(__name__)

RUN_TEMPLATE = "chat/evals/run.html"
COMPARISON_TEMPLATE = "chat/evals/comparison.html"
FRAGMENT = "evals.fragment"
STOP = "evals.stop"
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
FINISHED: dict[str, str] = {
    EvalStatus.COMPLETED: "The evaluation is completed: {passed} passed, {failed} failed.",
    EvalStatus.CANCELLED: "The evaluation was stopped: {passed} passed, {failed} failed.",
    EvalStatus.FAILED: "The evaluation failed: {error}",
    EvalStatus.INTERRUPTED: "The evaluation was interrupted: {error}",
}
"""What a screen reader hears when an evaluation ends; the rows themselves are not announced."""


def eval_group(eval_run_id: int) -> str:
    """The group the sockets of an evaluation's page join."""
    return f"eval.{eval_run_id}"


def comparison_group(comparison_id: int) -> str:
    """The group the sockets of a comparison's page join."""
    return f"comparison.{comparison_id}"


def control_group(eval_run_id: int) -> str:
    """The group the process replaying an evaluation listens on for Stop."""
    return f"eval-control.{eval_run_id}"


def render(template: str, partial: str, context: dict[str, Any]) -> str:
    """One named fragment of an evaluation page; names are ours, never the client's."""
    return render_to_string(f"{template}#{partial}", context)


# The evaluation page: one slot per case and attempt, filled as results arrive.


@dataclass(frozen=True)
class Slot:
    """One attempt at one case: its result, or none yet (waiting, or never made: stopped)."""

    key: str
    case_title: str
    attempt: int
    expected_text: str
    result: EvalResult | None = None


@dataclass
class Table:
    eval_run: EvalRun
    slots: list[Slot]
    planned: bool
    """Whether the slots of attempts still to come are known (`compare.covered_cases`)."""

    @property
    def tally(self) -> compare.Tally:
        return compare.Tally.of(self.eval_run)


def slot_key(case_id: int | None, attempt: int, result: EvalResult | None = None) -> str:
    if case_id is None:
        return f"r{result.pk if result else 0}"
    return f"c{case_id}-{attempt}"


def slot_of(result: EvalResult) -> Slot:
    key = slot_key(result.case_id, result.attempt, result)
    return Slot(key, result.case_title, result.attempt, result.expected_text, result)


def table(eval_run: EvalRun) -> Table:
    """Every slot of an evaluation in case order, then attempt; results of cases deleted
    since come last."""
    found = list(eval_run.results.select_related("run").order_by("case_id", "attempt", "pk"))
    planned: Sequence[Case] | None = compare.covered_cases(eval_run)
    if planned is None:
        return Table(eval_run, [slot_of(result) for result in found], planned=False)
    by_slot = {(result.case_id, result.attempt): result for result in found}
    slots = [
        Slot(
            slot_key(case.pk, n), case.title, n, case.expected_text, by_slot.pop((case.pk, n), None)
        )
        for case in planned
        for n in range(1, eval_run.repeat + 1)
    ]
    slots += [slot_of(result) for result in by_slot.values()]
    return Table(eval_run, slots, planned=True)


def finished_text(eval_run: EvalRun) -> str:
    text = FINISHED.get(eval_run.status, "The evaluation ended: {error}")
    return text.format(
        passed=eval_run.passed, failed=eval_run.failed, error=eval_run.error or "no reason given"
    )


def run_fragments(eval_run: EvalRun, result: EvalResult | None = None) -> list[str]:
    """An evaluation's progress and its new row; without `result`, every row (the catch-up of a
    socket, the end); once it has ended, also its end (no Stop, the announcement).

    Table parts go in frames of their own: htmx parses a frame as a template, where a `<tr>`
    after a `<div>` would be dropped.
    """
    context: dict[str, Any] = {"eval_run": eval_run, "oob": True}
    page = render(RUN_TEMPLATE, "progress", {**context, "tally": compare.Tally.of(eval_run)})
    if not eval_run.is_active:
        page += render(RUN_TEMPLATE, "actions", {**context, "can_stop": False})
        page += render(RUN_TEMPLATE, "announce", {**context, "announce": finished_text(eval_run)})
    if result is not None and result.case_id is not None and compare.covered_cases(eval_run):
        rows = render(RUN_TEMPLATE, "result-row", {**context, "slot": slot_of(result)})
    else:
        rows = render(RUN_TEMPLATE, "results-body", {**context, "table": table(eval_run)})
    return [rows, page]


def comparison_fragments(
    comparison: Comparison, result: EvalResult | None = None, *, end: bool = False
) -> list[str]:
    """A comparison's progress, its targets' headings and the row of `result`'s case; without
    it, the whole matrix; with `end` (every target has ended), also no Stop and the
    announcement. Each table part in a frame of its own (`run_fragments` says why)."""
    shown = compare.matrix(comparison)
    context: dict[str, Any] = {"matrix": shown, "oob": True}
    page = render(COMPARISON_TEMPLATE, "progress", context)
    if end:
        announce = f"The comparison is finished: {shown.differing} case(s) decided differently."
        page += render(COMPARISON_TEMPLATE, "actions", {**context, "can_stop": False})
        page += render(COMPARISON_TEMPLATE, "announce", {**context, "announce": announce})
    head = render(COMPARISON_TEMPLATE, "matrix-head", context)
    if result is not None and result.case_id is not None and shown.planned:
        key = compare.row_key(result.case_id, result)
        row = next((row for row in shown.rows if row.key == key), None)
        if row is not None:
            return [render(COMPARISON_TEMPLATE, "matrix-row", {**context, "row": row}), head, page]
    return [render(COMPARISON_TEMPLATE, "matrix-body", context), head, page]


class Publisher:
    """The listener of one evaluation (`replay.run_eval`): each result becomes fragments for its
    page's group and its comparison's.

    Renders read the database; the lock keeps one render-and-send at a time, so a later
    progress never reaches the page before an earlier one. The evaluations of a comparison
    share a lock: a matrix row holds every target's results for its case.
    """

    def __init__(self, eval_run: EvalRun, lock: asyncio.Lock | None = None) -> None:
        self.eval_run_id = eval_run.pk
        self.comparison_id = eval_run.comparison_id
        self.lock = lock or asyncio.Lock()
        self.layer = get_channel_layer()

    async def __call__(self, eval_run: EvalRun, result: EvalResult) -> None:
        await self.publish(result)

    async def finished(self) -> None:
        """The evaluation has ended: every row (the attempts never made say so), no Stop."""
        await self.publish(None)

    async def publish(self, result: EvalResult | None) -> None:
        if self.layer is None:
            return
        async with self.lock:
            frames = await database_sync_to_async(self._frames)(result)
            for group, parts, final in frames:
                await self.layer.group_send(
                    group, {"type": FRAGMENT, "parts": parts, "final": final}
                )

    def _frames(self, result: EvalResult | None) -> list[tuple[str, list[str], bool]]:
        eval_run = EvalRun.objects.get(pk=self.eval_run_id)
        ended = not eval_run.is_active
        frames = [(eval_group(eval_run.pk), run_fragments(eval_run, result), ended)]
        if self.comparison_id is not None:
            comparison = Comparison.objects.get(pk=self.comparison_id)
            # A target that ended is not the comparison's end: the matrix is re-drawn (its
            # attempts never made say so) and its socket stays for the other targets.
            parts = comparison_fragments(comparison, result)
            frames.append((comparison_group(comparison.pk), parts, False))
        return frames


async def publish_comparison_end(comparison_id: int) -> None:
    """Every target of a comparison has ended: the whole matrix, no Stop, the announcement."""
    layer = get_channel_layer()
    if layer is None:
        return

    def frame() -> list[str]:
        return comparison_fragments(Comparison.objects.get(pk=comparison_id), end=True)

    parts = await database_sync_to_async(frame)()
    await layer.group_send(
        comparison_group(comparison_id), {"type": FRAGMENT, "parts": parts, "final": True}
    )


# Stop: the task replaying an evaluation is cancelled in whichever process holds it.


async def request_stop(eval_run_id: int) -> None:
    """Stop an evaluation: here when this process replays it, else through the channel layer
    (the process that does listens on the evaluation's control group)."""
    if replay.cancel(eval_run_id):
        return
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(control_group(eval_run_id), {"type": STOP})


async def listen_for_stop(eval_run_id: int, task: asyncio.Task[Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    channel = await layer.new_channel()
    group = control_group(eval_run_id)
    await layer.group_add(group, channel)
    try:
        while True:
            # No timeout on this read (chat/runs/control.py's listen says why).
            message = await layer.receive(channel)
            if message.get("type") == STOP and not task.cancelling():
                task.cancel()
    finally:
        await asyncio.shield(layer.group_discard(group, channel))


async def watched(
    eval_run: EvalRun,
    cases: Sequence[Case],
    target: replay.Target,
    *,
    user: Any,
    lock: asyncio.Lock | None = None,
) -> EvalRun:
    """`replay.run_eval` with its pages told of every result and of its end, and stoppable
    from any process."""
    publisher = Publisher(eval_run, lock)
    task = asyncio.current_task()
    stop = asyncio.create_task(listen_for_stop(eval_run.pk, task)) if task else None
    try:
        return await replay.run_eval(eval_run, cases, target, user=user, listeners=[publisher])
    finally:
        if stop is not None:
            stop.cancel()
        try:
            await asyncio.shield(publisher.finished())
        except Exception:
            logger.exception("eval %s: the end was not published", eval_run.pk)


def launch(work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """Start an evaluation's work as a task of this process, not tied to the request that asked
    for it; kept in `liveness.background`, so a stopping process cancels it (its evaluations
    end interrupted)."""
    # A fresh context, as for runs: not the request's thread executor, gone after the response.
    task = asyncio.create_task(work, context=contextvars.Context())
    liveness.background.add(task)
    task.add_done_callback(liveness.background.discard)
    return task


def start_eval(
    eval_run: EvalRun, cases: Sequence[Case], target: replay.Target, *, user: Any
) -> asyncio.Task[Any]:
    return launch(watched(eval_run, cases, target, user=user))


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

    return launch(work())


class EvalProgressConsumer(AsyncWebsocketConsumer):
    """A page watching an evaluation (`runs`) or a comparison (`compare`) live: it only
    listens. On connect it gets the page's live parts as they are now, then every push; once
    the evaluation has ended the socket closes (normally: the page does not reconnect)."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        kwargs = self.scope["url_route"]["kwargs"]
        kind, pk = kwargs["kind"], kwargs["pk"]
        if kind == "runs" and await EvalRun.objects.filter(pk=pk).aexists():
            self.group = eval_group(pk)
        elif kind == "compare" and await Comparison.objects.filter(pk=pk).aexists():
            self.group = comparison_group(pk)
        else:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        parts, active = await database_sync_to_async(_snapshot)(kind, pk)
        for part in parts:
            await self.send(text_data=part)
        if not active:
            await self.close()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Fragments touch no database: skip Channels' per-message aclose_old_connections
        # (ChatConsumer.dispatch says why).
        if message["type"] == FRAGMENT:
            await self.evals_fragment(message)
            return
        await super().dispatch(message)

    async def evals_fragment(self, event: dict[str, Any]) -> None:
        try:
            for part in event["parts"]:
                await self.send(text_data=part)
            if event.get("final"):
                await self.close()
        except Disconnected:
            logger.debug("%s: a frame for a closed socket", self.group)


def _snapshot(kind: str, pk: int) -> tuple[list[str], bool]:
    """The live parts of a page as they are now, and whether there is more to come."""
    if kind == "runs":
        eval_run = EvalRun.objects.get(pk=pk)
        return run_fragments(eval_run), eval_run.is_active
    comparison = Comparison.objects.get(pk=pk)
    active = comparison.eval_runs.in_progress().exists()
    return comparison_fragments(comparison, end=not active), active
