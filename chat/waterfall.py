"""A run as a waterfall: its model calls and tool calls on one time axis, drawn on the server as
SVG. No script and no style attribute (the CSP allows neither): geometry is in presentation
attributes, colours are classes of the lab's one palette (static/css/palette.css, in the chat and
the admin alike), and a legend says what each means."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from chat import approval_record
from chat.agent.tools import humanize
from chat.models import LeaseEnd, ModelCall, Run, RunLease, ToolCall
from chat.waterfall_legend import legend

TOP = 6
AXIS = 26
MIN_BAR = 2.0
"""A bar is at least this wide, so a call of no measurable length still shows."""


@dataclass(frozen=True)
class Layout:
    """Where things go. Wide: labels and durations in a column left of the bars. Narrow (a
    phone's): each label above its bar, so the bars get the whole width."""

    name: str
    width: int
    gutter: int
    row: int
    label_chars: int

    @property
    def narrow(self) -> bool:
        return self.gutter == 0


WIDE = Layout("wide", width=680, gutter=232, row=22, label_chars=25)
NARROW = Layout("narrow", width=360, gutter=0, row=32, label_chars=40)
PAD = 8
"""Space at either end of the time axis."""


@dataclass(frozen=True)
class Bar:
    """One row: a model call or a tool call, in milliseconds from the run's start."""

    kind: str
    """"model", "tool", "wait" (the run waited for a person to decide its calls), or "gap" (no
    process held the run; another resumed it)."""
    step: int
    label: str
    title: str
    start: float
    end: float
    first_token: float | None = None
    status: str = ""
    position: int = 0
    shown: str = ""
    """The duration as the row says it, when not as `took` would."""

    @property
    def failed(self) -> bool:
        return self.status == "failed"


def milliseconds(moment: datetime, origin: datetime) -> float:
    return max((moment - origin).total_seconds() * 1000, 0.0)


def model_bar(call: ModelCall, origin: datetime) -> Bar:
    """A model call's row. Its row is written when the call ends, so `started_at` is its end:
    it began `duration` earlier."""
    took = call.duration or 0.0
    start = milliseconds(call.started_at - timedelta(seconds=took), origin)
    tokens = (
        f" · {call.prompt_tokens:,}→{call.completion_tokens:,} tok" if call.total_tokens else ""
    )
    first = call.time_to_first_token
    title = f"Step {call.step}, model call: {took:.2f} s"
    if first is not None:
        title += f", first token after {first:.2f} s"
    if call.total_tokens:
        title += f", {call.prompt_tokens:,} in → {call.completion_tokens:,} out tokens"
    if call.error:
        title += f", failed: {call.error}"
    return Bar(
        kind="model",
        step=call.step,
        label=f"step {call.step}{tokens}",
        title=title,
        start=start,
        end=start + took * 1000,
        first_token=None if first is None else start + first * 1000,
        status="failed" if call.error else "completed",
    )


def tool_bar(call: ToolCall, origin: datetime) -> Bar | None:
    """A tool call's row; None for a call with no time recorded. Calls of a turn run together
    and their rows are written at once, so a finished call started `duration` before its end."""
    if call.finished_at is not None and call.duration is not None:
        end = milliseconds(call.finished_at, origin)
        start = max(end - call.duration * 1000, 0.0)
    elif call.started_at is not None:
        start = milliseconds(call.started_at, origin)
        end = start + (call.duration or 0.0) * 1000
        if call.finished_at is not None:
            end = max(milliseconds(call.finished_at, origin), start)
    else:
        return None
    title = f"{call.display_name} ({call.name}): {(end - start) / 1000:.2f} s, "
    title += call.get_failure_display() if call.failure else call.get_status_display().lower()
    if call.error:
        title += f": {call.error}"
    return Bar(
        kind="tool",
        step=call.step,
        label=humanize(call.name),
        title=title,
        start=start,
        end=end,
        status=call.status,
        position=call.position,
    )


def wait_bars(tool_calls: Iterable[ToolCall], origin: datetime) -> list[Bar]:
    """For each step whose calls asked first, the time the run waited for a person: from the
    question to the last decision (to now, while it waits). Its title says each decision."""
    asked: dict[int, list[ToolCall]] = {}
    for call in tool_calls:
        if call.asked_at is not None:
            asked.setdefault(call.step, []).append(call)
    bars = []
    for step, calls in asked.items():
        start = min(milliseconds(call.asked_at, origin) for call in calls if call.asked_at)
        end = max(milliseconds(call.decided_at or timezone.now(), origin) for call in calls)
        seconds = (end - start) / 1000
        shown = approval_record.span(seconds) if seconds >= 1 else took(end - start)
        said = "; ".join(f"{c.display_name} {approval_record.decision(c)}" for c in calls)
        still = any(call.is_waiting for call in calls)
        title = f"Waiting for approval for {shown} so far: {said}" if still else ""
        title = title or f"Waited {shown} for approval: {said}"
        status = "waiting" if still else "decided"
        label = "waiting for approval"
        bars.append(Bar("wait", step, label, title, start, end, status=status, shown=shown))
    return bars


def gap_bars(leases: Sequence[RunLease], rows: Sequence[Bar], origin: datetime) -> list[Bar]:
    """For each process that resumed the run, the time no process held it: from the end of the
    last thing done before (a killed process says nothing of when it died) to the claim. A run
    that waited for a person has its wait bar there instead."""
    gaps = []
    for before, lease in itertools.pairwise(leases):
        if before.outcome == LeaseEnd.WAITING:
            continue
        claimed = milliseconds(lease.acquired_at, origin)
        done = [bar.end for bar in rows if bar.end <= claimed]
        start = max(done, default=milliseconds(before.acquired_at, origin))
        later = [bar.step for bar in rows if bar.kind == "model" and bar.start >= claimed]
        step = min(later, default=max((bar.step for bar in rows), default=0) + 1)
        how = before.get_outcome_display().lower() if before.outcome else "held"
        title = (
            f"No process held the run for {(claimed - start) / 1000:.2f} s "
            f"({before.worker}: {how}); {lease.worker} resumed it"
        )
        host_pid = ":".join(lease.worker.split(":")[:2])
        gaps.append(Bar("gap", step, f"resumed by {host_pid}", title, start, claimed, None, "gap"))
    return gaps


def bars(
    run: Run,
    model_calls: Iterable[ModelCall],
    tool_calls: Iterable[ToolCall],
    leases: Sequence[RunLease] = (),
) -> list[Bar]:
    """Rows in step order: each step's model call, then its tool calls in the order the model
    asked for them, one row each, so calls that ran at the same time overlap on separate rows;
    the wait for a person's decisions comes between a step's model call and its tool calls; a
    gap where the run waited for another process to resume it comes before that step."""
    origin = run.started_at
    tool_calls = list(tool_calls)
    rows = [model_bar(call, origin) for call in model_calls]
    rows += [bar for call in tool_calls if (bar := tool_bar(call, origin)) is not None]
    rows += wait_bars(tool_calls, origin)
    rows += gap_bars(sorted(leases, key=lambda lease: lease.acquired_at), rows, origin)
    order = {"gap": 0, "model": 1, "wait": 2, "tool": 3}
    return sorted(rows, key=lambda bar: (bar.step, order[bar.kind], bar.position))


def ticks(span: float) -> list[float]:
    """A few round times from 0 to `span` milliseconds: steps of 1, 2 or 5 times a power of 10."""
    rough = span / 4
    power = 10 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    return [n * step for n in range(int(span // step) + 1)]


def clock(ms: float) -> str:
    """A tick's time: ticks are round, so "500 ms", "1 s", "1.5 s"."""
    return f"{round(ms / 1000, 6):g} s" if ms >= 1000 else f"{round(ms, 6):g} ms"


def took(ms: float) -> str:
    """A bar's duration, as precise as it is worth: "1.50 s", "21 ms", "0.027 ms"."""
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.2g} ms"


def summary(run: Run, rows: Sequence[Bar], span: float) -> str:
    """What the picture shows, in words: its accessible name."""
    seconds = run.duration if run.duration is not None else span / 1000
    models = sum(bar.kind == "model" for bar in rows)
    tools = sum(bar.kind == "tool" for bar in rows)
    gaps = sum(bar.kind == "gap" for bar in rows)
    failed = sum(bar.kind == "tool" and bar.failed for bar in rows)
    text = (
        f"Run of {seconds:.2f} s: {models} model call{'s' * (models != 1)}, "
        f"{tools} tool call{'s' * (tools != 1)}"
    )
    text += f" ({failed} failed)" if failed else ""
    waits = [bar for bar in rows if bar.kind == "wait"]
    if waits:
        seconds = sum(bar.end - bar.start for bar in waits) / 1000
        text += f", waited {approval_record.span(seconds)} for approval"
    return text + (f", resumed {gaps} time{'s' * (gaps != 1)}" if gaps else "")


def fit(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def picture(
    run: Run,
    model_calls: Iterable[ModelCall],
    tool_calls: Iterable[ToolCall],
    leases: Iterable[RunLease] = (),
) -> SafeString:
    """The waterfall in both layouts (the stylesheet shows the one that fits the screen), and
    its legend."""
    model_calls, tool_calls, held = list(model_calls), list(tool_calls), list(leases)
    return format_html(
        "{}{}{}",
        svg(run, model_calls, tool_calls, held),
        svg(run, model_calls, tool_calls, held, NARROW),
        legend(bars(run, model_calls, tool_calls, held)),
    )


def svg(
    run: Run,
    model_calls: Iterable[ModelCall],
    tool_calls: Iterable[ToolCall],
    leases: Sequence[RunLease] = (),
    layout: Layout = WIDE,
) -> SafeString:
    """The waterfall of a run as an <svg>; empty when there is nothing timed to draw."""
    rows = bars(run, model_calls, tool_calls, leases)
    if not rows:
        return SafeString("")
    span = max([bar.end for bar in rows] + [(run.duration or 0.0) * 1000, 1.0])
    left = layout.gutter + PAD
    scale = (layout.width - left - PAD) / span
    axis_y = TOP + len(rows) * layout.row + 4
    height = axis_y + AXIS - 4

    def x(ms: float) -> float:
        return left + ms * scale

    parts = [
        format_html(
            '<line class="wf-grid" x1="{}" y1="{}" x2="{}" y2="{}"/>'
            '<text class="wf-tick" x="{}" y="{}" text-anchor="{}">{}</text>',
            f"{x(tick):.1f}",
            TOP,
            f"{x(tick):.1f}",
            axis_y + 4,
            f"{x(tick):.1f}",
            axis_y + 16,
            "start" if tick == 0 else "end" if x(tick) + 24 > layout.width else "middle",
            clock(tick),
        )
        for tick in ticks(span)
    ]
    parts.append(
        format_html(
            '<line class="wf-axis" x1="{}" y1="{}" x2="{}" y2="{}"/>',
            left,
            axis_y,
            layout.width - PAD,
            axis_y,
        )
    )
    for number, bar in enumerate(rows):
        above = rows[number - 1] if number else None
        parts.append(_row(bar, TOP + number * layout.row, layout, x, scale, above))
    said = summary(run, rows, span)
    return format_html(
        '<svg class="waterfall waterfall-{}" xmlns="http://www.w3.org/2000/svg" role="img" '
        'aria-label="{}" width="{}" height="{}" viewBox="0 0 {} {}"><title>{}</title>{}</svg>',
        layout.name,
        said,
        layout.width,
        height,
        layout.width,
        height,
        f"Waterfall of run {run.pk}: {said}",
        format_html_join("", "{}", ((part,) for part in parts)),
    )


def _row(
    bar: Bar,
    top: int,
    layout: Layout,
    x: Callable[[float], float],
    scale: float,
    above: Bar | None,
) -> SafeString:
    """One row: the label and the duration, the bar with its title, the first-token tick."""
    tall = {"model": 12, "tool": 9, "wait": 9}.get(bar.kind, 6)
    middle = top + layout.row - 4 - tall / 2 if layout.narrow else top + layout.row / 2
    width = max((bar.end - bar.start) * scale, MIN_BAR)
    label_classes = f"wf-label wf-label-{bar.kind}" + (" wf-label-failed" if bar.failed else "")
    indent = 0 if bar.kind == "model" else 12
    parts = []
    if above is not None and above.step != bar.step:
        parts.append(
            format_html(
                '<line class="wf-step" x1="0" y1="{}" x2="{}" y2="{}"/>', top, layout.width, top
            )
        )
    if layout.narrow:
        parts.append(
            format_html(
                '<text class="{}" x="{}" y="{}">{} <tspan class="wf-time">· {}</tspan></text>',
                label_classes,
                PAD + indent,
                top + 13,
                fit(bar.label, layout.label_chars - indent // 6),
                bar.shown or took(bar.end - bar.start),
            )
        )
    else:
        parts.append(
            format_html(
                '<text class="{}" x="{}" y="{}">{}</text>'
                '<text class="wf-time" x="{}" y="{}" text-anchor="end">{}</text>',
                label_classes,
                4 + indent,
                f"{middle + 4:.1f}",
                fit(bar.label, layout.label_chars),
                layout.gutter - 4,
                f"{middle + 4:.1f}",
                bar.shown or took(bar.end - bar.start),
            )
        )
    parts.append(
        format_html(
            '<rect class="wf-bar wf-{} wf-{}" x="{}" y="{}" width="{}" height="{}" rx="2">'
            "<title>{}</title></rect>",
            bar.kind,
            bar.status or "unknown",
            f"{x(bar.start):.1f}",
            f"{middle - tall / 2:.1f}",
            f"{width:.1f}",
            tall,
            bar.title,
        )
    )
    if bar.first_token is not None:
        parts.append(
            format_html(
                '<line class="wf-first-token" x1="{}" y1="{}" x2="{}" y2="{}"/>',
                f"{x(bar.first_token):.1f}",
                f"{middle - tall / 2 - 3:.1f}",
                f"{x(bar.first_token):.1f}",
                f"{middle + tall / 2 + 3:.1f}",
            )
        )
    return format_html_join("", "{}", ((part,) for part in parts))
