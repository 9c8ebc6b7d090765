"""Live progress of evaluations: each finished attempt becomes fragments for the pages watching
it (its own page, and its comparison's matrix), broadcast to their sockets (chat.consumers).

The pages are rendered from the database with the same partials. Every fragment replaces an
element by its id, so a frame that arrives twice (the catch-up sent on connect, then a push
already in flight) changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels.db import database_sync_to_async
from django.template.loader import render_to_string

from chat.evals import compare
from chat.evals.tables import row_key, table
from chat.fragments import broadcast, ended_text
from chat.models import Comparison, EvalResult, EvalRun

logger = logging.getLogger(__name__)

RUN_TEMPLATE = "chat/evals/run.html"
COMPARISON_TEMPLATE = "chat/evals/comparison.html"


def eval_group(eval_run_id: int) -> str:
    """The group the sockets of an evaluation's page join."""
    return f"eval.{eval_run_id}"


def comparison_group(comparison_id: int) -> str:
    """The group the sockets of a comparison's page join."""
    return f"comparison.{comparison_id}"


def render(template: str, partial: str, context: dict[str, Any]) -> str:
    """One named fragment of an evaluation page; names are ours, never the client's."""
    return render_to_string(f"{template}#{partial}", context)


def finished_text(eval_run: EvalRun) -> str:
    tally = f": {eval_run.passed} passed, {eval_run.failed} failed"
    said = ended_text("evaluation", eval_run.status, eval_run.error, tally)
    return f"{said} {eval_run.outcome}" if eval_run.outcome else said


def run_fragments(eval_run: EvalRun, result: EvalResult | None = None) -> list[str]:
    """An evaluation's progress and the row of `result`'s case; without it, every row (the
    catch-up of a socket, the end); once it has ended, also its end (no Stop, the announcement).

    Table parts go in frames of their own: htmx parses a frame as a template, where a `<tr>`
    after a `<div>` would be dropped.
    """
    context: dict[str, Any] = {"eval_run": eval_run, "oob": True}
    page = render(RUN_TEMPLATE, "progress", {**context, "tally": compare.Tally.of(eval_run)})
    if not eval_run.is_active:
        page += render(RUN_TEMPLATE, "actions", {**context, "can_stop": False})
        page += render(RUN_TEMPLATE, "announce", {**context, "announce": finished_text(eval_run)})
        if eval_run.publishes:
            page += render(RUN_TEMPLATE, "publication", context)
    shown = table(eval_run)
    row = None
    if result is not None and result.case_id is not None and shown.planned:
        row = shown.row(row_key(result))
    if row is not None:
        rows = render(RUN_TEMPLATE, "case-group", {**context, "row": row})
    else:
        rows = render(RUN_TEMPLATE, "results-body", {**context, "table": shown})
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
        detail = f": {shown.differing} case(s) decided differently"
        announce = ended_text("comparison", "completed", detail=detail)
        page += render(COMPARISON_TEMPLATE, "actions", {**context, "can_stop": False})
        page += render(COMPARISON_TEMPLATE, "announce", {**context, "announce": announce})
    head = render(COMPARISON_TEMPLATE, "matrix-head", context)
    if result is not None and result.case_id is not None and shown.planned:
        key = compare.row_key(result.case_id, result)
        row = next((row for row in shown.rows if row.key == key), None)
        if row is not None:
            return [render(COMPARISON_TEMPLATE, "matrix-row", {**context, "row": row}), head, page]
    return [render(COMPARISON_TEMPLATE, "matrix-body", context), head, page]


PAGES = {"runs": (EvalRun, eval_group), "compare": (Comparison, comparison_group)}
"""The live evaluation pages by the kind their socket's address names: model and group."""


def snapshot(kind: str, pk: int) -> tuple[list[str], bool]:
    """A page's live parts as they are now, and whether there is more to come."""
    if kind == "runs":
        eval_run = EvalRun.objects.get(pk=pk)
        return run_fragments(eval_run), eval_run.is_active
    comparison = Comparison.objects.get(pk=pk)
    active = comparison.eval_runs.in_progress().exists()
    return comparison_fragments(comparison, end=not active), active


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

    async def __call__(self, eval_run: EvalRun, result: EvalResult) -> None:
        await self.publish(result)

    async def finished(self) -> None:
        """The evaluation has ended: every row (the attempts never made say so), no Stop."""
        await self.publish(None)

    async def publish(self, result: EvalResult | None) -> None:
        async with self.lock:
            frames = await database_sync_to_async(self._frames)(result)
            for group, parts, final in frames:
                await broadcast(group, parts, close=final)

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

    def frame() -> list[str]:
        return comparison_fragments(Comparison.objects.get(pk=comparison_id), end=True)

    parts = await database_sync_to_async(frame)()
    await broadcast(comparison_group(comparison_id), parts, close=True)
