"""The waterfall's legend: what each colour and mark of a run's picture means, drawn with the
bars' own classes (the lab's palette), so the legend and the bars cannot disagree."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

if TYPE_CHECKING:
    from chat.waterfall import Bar


IDLE = {"cancelled", "in_progress", "unknown"}
"""Statuses drawn in the idle colour: a call stopped, or under way."""
KEYS: tuple[tuple[str, str, Callable[[Bar], bool]], ...] = (
    (
        '<rect class="wf-bar wf-model wf-completed" x="0" y="0" width="16" height="10" rx="2"/>',
        "Model call",
        lambda bar: bar.kind == "model" and not bar.failed,
    ),
    (
        '<rect class="wf-bar wf-model wf-completed" x="0" y="0" width="16" height="10" rx="2"/>'
        '<line class="wf-first-token" x1="6" y1="-2" x2="6" y2="12"/>',
        "First token",
        lambda bar: bar.first_token is not None,
    ),
    (
        '<rect class="wf-bar wf-tool wf-completed" x="0" y="1" width="16" height="8" rx="2"/>',
        "Tool call",
        lambda bar: bar.kind == "tool" and bar.status == "completed",
    ),
    (
        '<rect class="wf-bar wf-tool wf-failed" x="0" y="1" width="16" height="8" rx="2"/>',
        "Failed",
        lambda bar: bar.failed,
    ),
    (
        '<rect class="wf-bar wf-tool wf-cancelled" x="0" y="1" width="16" height="8" rx="2"/>',
        "Stopped or still running",
        lambda bar: bar.kind in ("model", "tool") and (bar.status or "unknown") in IDLE,
    ),
    (
        '<rect class="wf-bar wf-wait wf-decided" x="0" y="1" width="16" height="8" rx="2"/>',
        "Waiting for approval",
        lambda bar: bar.kind == "wait",
    ),
    (
        '<rect class="wf-bar wf-gap" x="0.5" y="2" width="15" height="6" rx="2"/>',
        "No process held the run",
        lambda bar: bar.kind == "gap",
    ),
)
"""The legend's entries: a sample drawn with the bars' own classes, its meaning, and which bars
it explains (an entry shows only when the run has one)."""


def legend(rows: Sequence[Bar]) -> SafeString:
    """What each colour and mark of this run's waterfall means, as a list beside the picture."""
    shown = [(SafeString(sample), text) for sample, text, shows in KEYS if any(map(shows, rows))]
    if not shown:
        return SafeString("")
    return format_html(
        '<ul class="waterfall-legend" aria-label="Legend">{}</ul>',
        format_html_join(
            "",
            '<li><svg class="waterfall-key" width="16" height="10" viewBox="0 0 16 10" '
            'aria-hidden="true">{}</svg>'
            "{}</li>",
            shown,
        ),
    )
