"""Figures per day as SVG drawn on the server, like the waterfall: no script and no style
attribute (the CSP allows neither), geometry in presentation attributes, colours as classes
(`static/css/palette.css`, shared by the chat and the admin). Each chart comes in a wide and a
narrow layout (the stylesheet shows the one that fits), with a title and a description in
words, and a legend in HTML."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from chat.waterfall import ticks

TOP = 10
BOTTOM = 22
HEIGHT = 190


@dataclass(frozen=True)
class Layout:
    name: str
    width: int
    gutter: int
    labels: int
    """Dates written under the axis, at most."""


WIDE = Layout("wide", width=560, gutter=52, labels=6)
NARROW = Layout("narrow", width=340, gutter=46, labels=4)


@dataclass(frozen=True)
class Series:
    """One coloured series: `key` names its class (`chart-<key>`), `label` its legend entry."""

    key: str
    label: str
    values: Sequence[float | None]


def day_text(day: date) -> str:
    return f"{day.day} {day:%b}"


def long_day(day: date) -> str:
    return f"{day.day} {day:%b %Y}"


@dataclass(frozen=True)
class Chart:
    """Values per day: bars stacked series on series, or lines (a gap where a day has none)."""

    name: str
    title: str
    days: Sequence[date]
    series: Sequence[Series]
    unit: Callable[[float], str]
    lines: bool = False
    whole: bool = True
    """Counts: the scale's steps are whole numbers."""
    exact: Callable[[float], str] | None = None
    """How a value reads in words and tooltips, when not as on the scale (`unit`)."""

    def said(self, value: float) -> str:
        return (self.exact or self.unit)(value)

    @property
    def empty(self) -> bool:
        return not any(value for each in self.series for value in each.values)

    def top(self) -> float:
        if self.lines:
            highest = max((v for each in self.series for v in each.values if v), default=0.0)
        else:
            highest = max(
                (sum(each.values[n] or 0 for each in self.series) for n in range(len(self.days))),
                default=0.0,
            )
        return float(highest)

    def scale(self) -> list[float]:
        """Round values from 0 to at least the highest, for the grid."""
        highest = self.top()
        marks = ticks(highest) if highest > 0 else [0.0, 1.0]
        step = marks[1] - marks[0] if len(marks) > 1 else highest
        if self.whole and step < 1:
            step, marks = 1.0, [float(n) for n in range(math.ceil(highest) + 1)]
        if marks[-1] < highest:
            marks.append(marks[-1] + step)
        return marks if len(marks) > 1 else [0.0, step or 1.0]

    def description(self) -> str:
        """The figures in words: each series' total (or, for lines, its highest day)."""
        if self.empty:
            return "Nothing in this period."
        said = []
        for each in self.series:
            known = [(v, day) for v, day in zip(each.values, self.days, strict=True) if v]
            if not known:
                said.append(f"{each.label}: none")
            elif self.lines:
                value, day = max(known, key=lambda pair: pair[0])
                said.append(f"{each.label}: highest {self.said(value)} on {long_day(day)}")
            else:
                said.append(f"{each.label}: {self.said(sum(v for v, _ in known))} in all")
        span = f"{long_day(self.days[0])} to {long_day(self.days[-1])}"
        return f"{self.title}, {span}. " + "; ".join(said) + ". The table below has each day."

    def html(self) -> SafeString:
        """The chart in both layouts with its legend, or a line saying there is nothing."""
        legend = format_html_join(
            "",
            '<li><svg class="chart-key" width="18" height="10" aria-hidden="true">{}</svg>{}</li>',
            ((swatch(each.key, self.lines), each.label) for each in self.series),
        )
        if self.empty:
            body = SafeString('<p class="chart-empty">Nothing in this period.</p>')
        else:
            body = format_html("{}{}", self.svg(WIDE), self.svg(NARROW))
        return format_html(
            '<figure class="chart" id="chart-{}"><figcaption>{}</figcaption>'
            '<ul class="chart-legend">{}</ul><div class="chart-frame">{}</div></figure>',
            self.name,
            self.title,
            legend,
            body,
        )

    def svg(self, layout: Layout) -> SafeString:
        marks = self.scale()
        ceiling = marks[-1]
        bottom = HEIGHT - BOTTOM
        slot = (layout.width - layout.gutter - 6) / len(self.days)

        def y(value: float) -> float:
            return bottom - value / ceiling * (bottom - TOP)

        def x(index: int) -> float:
            return layout.gutter + slot * (index + 0.5)

        parts = [
            format_html(
                '<line class="chart-grid" x1="{}" y1="{}" x2="{}" y2="{}"/>'
                '<text class="chart-tick" x="{}" y="{}" text-anchor="end">{}</text>',
                layout.gutter,
                f"{y(mark):.1f}",
                layout.width - 4,
                f"{y(mark):.1f}",
                layout.gutter - 5,
                f"{y(mark) + 4:.1f}",
                self.unit(mark),
            )
            for mark in marks
        ]
        for index in labelled(len(self.days), layout.labels):
            anchor = "middle"
            if len(self.days) > 1 and index == 0 and slot < 30:
                anchor = "start"
            elif len(self.days) > 1 and index == len(self.days) - 1 and slot < 30:
                anchor = "end"
            where = x(index) - slot / 2 if anchor == "start" else x(index)
            where = x(index) + slot / 2 if anchor == "end" else where
            parts.append(
                format_html(
                    '<text class="chart-tick" x="{}" y="{}" text-anchor="{}">{}</text>',
                    f"{where:.1f}",
                    HEIGHT - 6,
                    anchor,
                    day_text(self.days[index]),
                )
            )
        parts += self._lines(x, y) if self.lines else self._bars(x, y, slot)
        ident = f"chart-{self.name}-{layout.name}"
        return format_html(
            '<svg class="chart-svg chart-{}" xmlns="http://www.w3.org/2000/svg" role="img" '
            'aria-labelledby="{}-title" aria-describedby="{}-desc" width="{}" height="{}" '
            'viewBox="0 0 {} {}">'
            '<title id="{}-title">{}</title><desc id="{}-desc">{}</desc>{}</svg>',
            layout.name,
            ident,
            ident,
            layout.width,
            HEIGHT,
            layout.width,
            HEIGHT,
            ident,
            self.title,
            ident,
            self.description(),
            format_html_join("", "{}", ((part,) for part in parts)),
        )

    def _bars(
        self, x: Callable[[int], float], y: Callable[[float], float], slot: float
    ) -> list[SafeString]:
        width = max(slot * 0.72, 1.0)
        parts = []
        for index, day in enumerate(self.days):
            below = 0.0
            for each in self.series:
                value = each.values[index] or 0
                if not value:
                    continue
                parts.append(
                    format_html(
                        '<rect class="chart-bar chart-{}" x="{}" y="{}" width="{}" height="{}">'
                        "<title>{}: {} {}</title></rect>",
                        each.key,
                        f"{x(index) - width / 2:.2f}",
                        f"{y(below + value):.2f}",
                        f"{width:.2f}",
                        f"{max(y(below) - y(below + value), 0.5):.2f}",
                        long_day(day),
                        self.said(value),
                        each.label.lower(),
                    )
                )
                below += value
        return parts

    def _lines(self, x: Callable[[int], float], y: Callable[[float], float]) -> list[SafeString]:
        parts = []
        for each in self.series:
            runs: list[list[tuple[int, float]]] = [[]]
            for index, value in enumerate(each.values):
                if value is None:
                    runs.append([])
                else:
                    runs[-1].append((index, value))
            for run in filter(None, runs):
                points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in run)
                if len(run) > 1:
                    parts.append(
                        format_html(
                            '<polyline class="chart-line chart-{}" points="{}"/>', each.key, points
                        )
                    )
                dots = run if len(run) == 1 or len(self.days) <= 45 else []
                parts += [
                    format_html(
                        '<circle class="chart-dot chart-{}" cx="{}" cy="{}" r="2.6">'
                        "<title>{}: {} {}</title></circle>",
                        each.key,
                        f"{x(i):.1f}",
                        f"{y(v):.1f}",
                        long_day(self.days[i]),
                        each.label.lower(),
                        self.said(v),
                    )
                    for i, v in dots
                ]
        return parts


def labelled(count: int, most: int) -> list[int]:
    """Which of `count` days get a date under the axis: evenly spread, first and last."""
    if count <= most:
        return list(range(count))
    return sorted({round(n * (count - 1) / (most - 1)) for n in range(most)})


def swatch(key: str, line: bool) -> SafeString:
    """A legend's sample of a series, drawn with the series' own class."""
    if line:
        return format_html('<line class="chart-line chart-{}" x1="1" y1="5" x2="17" y2="5"/>', key)
    return format_html('<rect class="chart-bar chart-{}" x="3" y="0" width="12" height="10"/>', key)
