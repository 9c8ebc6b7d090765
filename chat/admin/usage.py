"""The admin's Usage page: runs, tokens, failures, tool-call errors and latency per day as
charts, and by model, user, agent and tool as tables (`chat.usage` does the sums, in the
database; `chat.charts` draws them). For staff who may view runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from chat import usage as figures
from chat.charts import Chart, Series, long_day
from chat.usage import Calls, Group, Period, Tally, Usage

KIND_LABELS = {"all": "Chats and evaluations", "chat": "Chats", "eval": "Evaluations"}
RANGES = (7, 30, 90, 365)


def may_see(user: Any) -> bool:
    """Staff who may view runs: the page sums them, by user among others."""
    return bool(user.is_active and user.is_staff and user.has_perm("chat.view_run"))


class UsageForm(forms.Form):
    """The page's query string: a range of days and which runs. What is left out takes its
    default: the last day today, the first 29 days before the last, every run."""

    since = forms.DateField(
        label="From", required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        label="To", required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    kind = forms.ChoiceField(
        label="Runs", choices=list(KIND_LABELS.items()), required=False, widget=forms.RadioSelect
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        until = data.get("until") or Period.recent().last
        since = data.get("since") or until - timedelta(days=29)
        if since > until:
            raise forms.ValidationError("The first day comes after the last: swap them.")
        if (until - since).days + 1 > figures.LONGEST:
            raise forms.ValidationError(
                f"A range of at most {figures.LONGEST} days, please "
                f"(this one has {(until - since).days + 1:,})."
            )
        return {"since": since, "until": until, "kind": data.get("kind") or "all"}


def count(value: float) -> str:
    return f"{round(value):,}"


def compact(value: float) -> str:
    """A scale's value in few characters: 950, 12k, 1.5M."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{float(f'{value / size:.3g}'):g}{suffix}"
    return f"{value:g}"


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.3g}%" if value < 0.1 else f"{value:.0%}"


def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 60:
        return f"{value / 60:.1f} min"
    return f"{value:.1f} s" if value >= 10 else f"{value:.2f} s"


def money(value: Decimal | float | None) -> str:
    if value is None:
        return "—"
    if 0 < value < 0.0001:
        return "< 0.0001"
    return f"{value:,.2f}" if value >= 0.01 or value == 0 else f"{value:.4f}"


def scale_money(value: float) -> str:
    return compact(value) if value >= 1000 else f"{value:g}"


@dataclass(frozen=True)
class Table:
    """A table as the template writes it: a caption, headers, rows of (text, note) cells."""

    name: str
    title: str
    headers: Sequence[str]
    rows: Sequence[Sequence[tuple[str, str]]]
    note: str = ""


def usage_view(request: HttpRequest) -> HttpResponse:
    if not may_see(request.user):
        raise PermissionDenied
    recent = Period.recent()
    given = request.GET if {"since", "until", "kind"} & set(request.GET) else None
    form = UsageForm(given, initial={"since": recent.first, "until": recent.last, "kind": "all"})
    found: Usage | None = None
    if given is None:
        found = figures.usage(recent)
    elif form.is_valid():
        chosen = form.cleaned_data
        found = figures.usage(Period(chosen["since"], chosen["until"], recent.zone), chosen["kind"])
        form = UsageForm(initial=chosen)  # shows what was left out as what it meant
    context = {
        **admin.site.each_context(request),
        "title": "Usage",
        "form": form,
        "ranges": ranges(recent.last, found.kind if found else "all"),
        "usage": found,
    }
    if found is not None:
        context |= page(found)
    return TemplateResponse(request, "admin/chat/usage.html", context)


def ranges(today: date, kind: str) -> list[tuple[str, str]]:
    """Links to the last 7, 30, 90 and 365 days, keeping which runs."""
    return [
        (
            f"Last {days} days",
            f"?since={today - timedelta(days=days - 1)}&until={today}&kind={kind}",
        )
        for days in RANGES
    ]


def page(found: Usage) -> dict[str, Any]:
    kinds = ["chat", "eval"] if found.kind == "all" else [found.kind]
    total = found.total
    totals = [
        ("Runs", count(total.runs), split(total.chats, total.evals, kinds)),
        ("Tokens", count(total.tokens), split(total.chat_tokens, total.eval_tokens, kinds)),
        ("Failed runs", count(total.failed), f"{percent(total.failure_rate)} of runs"),
        (
            "Tool calls",
            count(found.total_calls.calls),
            f"{percent(found.total_calls.error_rate)} failed",
        ),
        (
            "Run duration",
            seconds(found.latency.get(50)),
            f"p95 {seconds(found.latency.get(95))}{sampled(found.run_sample, 'run')}",
        ),
        (
            "Tool-call duration",
            seconds(found.call_latency.get(50)),
            f"p95 {seconds(found.call_latency.get(95))}{sampled(found.call_sample, 'call')}",
        ),
    ]
    if found.priced:
        unpriced = (
            f"{count(total.unpriced_tokens)} tokens unpriced" if total.unpriced_tokens else ""
        )
        totals.append(("Cost", money(total.cost or Decimal(0)), unpriced))
    return {
        "totals": totals,
        "charts": [chart.html() for chart in charts(found, kinds)],
        "days_table": days_table(found, kinds),
        "tables": [
            model_table(found),
            group_table("users", "By user", "User", found.users, found.priced),
            group_table("agents", "By agent version", "Agent", found.agents, found.priced),
            tool_table(found.tools),
        ],
        "kind_label": KIND_LABELS[found.kind],
        "period_label": f"{long_day(found.period.first)} to {long_day(found.period.last)}",
    }


def sampled(step: int, what: str) -> str:
    """How the percentiles were read, when not from every row."""
    return f" · from 1 {what} in {step:,}" if step > 1 else ""


def split(chats: int, evals: int, kinds: list[str]) -> str:
    return f"{chats:,} in chats, {evals:,} in evaluations" if len(kinds) == 2 else ""


KIND_SERIES = {"chat": "Chats", "eval": "Evaluations"}


def charts(found: Usage, kinds: list[str]) -> list[Chart]:
    days = found.period.days
    tallies = [found.days[day] for day in days]

    def per_kind(read: Callable[[Tally, str], float | None], label: str = "") -> list[Series]:
        return [
            Series(kind, f"{label}{KIND_SERIES[kind]}", [read(t, kind) for t in tallies])
            for kind in kinds
        ]

    calls = [found.day_calls[day] for day in days]
    made = [
        Chart("runs", "Runs per day", days, per_kind(runs_of), compact, exact=count),
        Chart("tokens", "Tokens per day", days, per_kind(tokens_of), compact, exact=count),
        Chart(
            "failures",
            "Failed runs per day",
            days,
            [
                Series("failed" if kind == "chat" else "failed-eval", label, values)
                for kind, label, values in (
                    ("chat", "Failed chats", [t.chat_failed for t in tallies]),
                    ("eval", "Failed evaluation runs", [t.eval_failed for t in tallies]),
                )
                if kind in kinds
            ],
            compact,
            exact=count,
        ),
        Chart(
            "tool-errors",
            "Tool-call error rate per day",
            days,
            [Series("tool-error", "Failed tool calls", [c.error_rate for c in calls])],
            percent_scale,
            lines=True,
            whole=False,
            exact=percent,
        ),
        latency_chart("latency", "Run duration per day", "", found.day_latency, days),
        latency_chart(
            "tool-latency", "Tool-call duration per day", "tool-", found.day_call_latency, days
        ),
    ]
    if found.priced:
        made.insert(
            2,
            Chart(
                "cost",
                "Cost per day",
                days,
                per_kind(cost_of),
                scale_money,
                whole=False,
                exact=money,
            ),
        )
    return made


def runs_of(tally: Tally, kind: str) -> float:
    return tally.chats if kind == "chat" else tally.evals


def tokens_of(tally: Tally, kind: str) -> float:
    return tally.chat_tokens if kind == "chat" else tally.eval_tokens


def cost_of(tally: Tally, kind: str) -> float | None:
    cost = tally.chat_cost if kind == "chat" else tally.eval_cost
    return None if cost is None else float(cost)


def percent_scale(value: float) -> str:
    return f"{value * 100:g}%"


def latency_chart(
    name: str, title: str, prefix: str, found: dict[date, dict[int, float]], days: list[date]
) -> Chart:
    series = [
        Series(f"{prefix}p{p}", label, [found.get(day, {}).get(p) for day in days])
        for p, label in ((50, "Median (p50)"), (95, "Slowest 5% (p95)"))
    ]
    return Chart(name, title, days, series, seconds_scale, lines=True, whole=False, exact=seconds)


def seconds_scale(value: float) -> str:
    return f"{value:g} s"


def days_table(found: Usage, kinds: list[str]) -> Table:
    both = len(kinds) == 2
    headers = ["Day", "Runs", *(["Chats", "Evaluations"] if both else []), "Failed", "Tokens"]
    headers += ["Cost"] if found.priced else []
    headers += ["Tool calls", "Tool errors", "Run p50", "Run p95", "Tool p50", "Tool p95"]
    rows = []
    for day in reversed(found.period.days):
        tally, calls = found.days[day], found.day_calls[day]
        run_p, call_p = found.day_latency.get(day, {}), found.day_call_latency.get(day, {})
        cells = [long_day(day), count(tally.runs)]
        cells += [count(tally.chats), count(tally.evals)] if both else []
        cells += [count(tally.failed), count(tally.tokens)]
        cells += [money(tally.cost)] if found.priced else []
        cells += [count(calls.calls), errors(calls)]
        cells += [seconds(run_p.get(50)), seconds(run_p.get(95))]
        cells += [seconds(call_p.get(50)), seconds(call_p.get(95))]
        rows.append([(cell, "") for cell in cells])
    return Table("days", "Day by day", headers, rows)


def errors(calls: Calls) -> str:
    return f"{calls.errors:,} ({percent(calls.error_rate)})" if calls.finished else "—"


def tally_cells(tally: Tally, priced: bool) -> list[tuple[str, str]]:
    cells = [
        (count(tally.runs), ""),
        (count(tally.chats), ""),
        (count(tally.evals), ""),
        (count(tally.failed), percent(tally.failure_rate) if tally.failed else ""),
        (count(tally.tokens), f"{tally.prompt_tokens:,} in · {tally.completion_tokens:,} out"),
    ]
    if priced:
        note = f"{tally.unpriced_tokens:,} tokens unpriced" if tally.unpriced_tokens else ""
        cells.append((money(tally.cost), note))
    return cells


TALLY_HEADERS = ["Runs", "Chats", "Evaluations", "Failed", "Tokens"]


def model_table(found: Usage) -> Table:
    headers = ["Model", *TALLY_HEADERS, *(["Cost"] if found.priced else []), "p50", "p95"]
    rows = [
        [
            (group.name, group.detail),
            *tally_cells(group.tally, found.priced),
            (seconds(group.p50), ""),
            (seconds(group.p95), ""),
        ]
        for group in found.models
    ]
    note = "Duration percentiles of each model's runs." if rows else ""
    return Table("models", "By model", headers, rows, note)


def group_table(
    name: str, title: str, what: str, groups: list[Group[Tally]], priced: bool
) -> Table:
    headers = [what, *TALLY_HEADERS, *(["Cost"] if priced else []), "Mean duration"]
    rows = [
        [
            (group.name, group.detail),
            *tally_cells(group.tally, priced),
            (seconds(group.tally.mean_seconds), ""),
        ]
        for group in groups
    ]
    return Table(name, title, headers, rows)


def tool_table(groups: list[Group[Calls]]) -> Table:
    headers = ["Tool", "Calls", "Failed", "p50", "p95"]
    rows = [
        [
            (group.name, group.detail),
            (count(group.tally.calls), ""),
            (errors(group.tally), ""),
            (seconds(group.p50), ""),
            (seconds(group.p95), ""),
        ]
        for group in groups
    ]
    note = "A call a person denied is not counted as failed; the rate is of the calls that ended."
    return Table("tools", "By tool", headers, rows, note)
