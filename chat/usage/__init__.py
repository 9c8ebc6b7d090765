"""Usage at a glance: runs, tokens, failures, tool-call errors and latency per day, and by model,
user, agent and tool, for the admin's Usage page.

Everything is aggregated in the database, grouped by day (in the server's time zone), by
conversation purpose (chats apart from evaluations' replays) and by model, so a page costs the
same six queries whatever the history's size, and returns rows bounded by the days shown times
the models, users, agent versions or tools there are, never by the runs. Cost is worked out from
those rows in Python, at AGENTLAB_MODEL_PRICES (`chat.prices`), only for priced models.

Percentiles (p50 and p95 of run and tool-call durations) are nearest-rank values computed in
SQL, alike on SQLite and PostgreSQL: ROW_NUMBER() and COUNT() windows over each grouping (day,
all, model or tool), keeping only the rows whose place is ceil(p * n), one query for runs and
one for tool calls. They are exact up to `sums.SAMPLE` rows in the period (a month of a busy
team's use); past that, they read every k-th row by id, a bounded sample fair to every day
and tool, so a year of 250,000 runs costs about what a month does. PostgreSQL's
percentile_cont would need a second code path (and interpolates between rows); SQLite has no
percentile function at all; a histogram would need a logarithm SQLite may not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date

from django.conf import settings

from chat.prices import Price

from .groups import Group, by_agent, by_model, by_tool, by_user
from .sums import (
    KINDS,
    LONGEST,
    Calls,
    Day,
    Period,
    Spread,
    Tally,
    calls_in,
    counted_calls,
    every,
    percentiles,
    runs_in,
    tallied,
)

__all__ = [
    "KINDS",
    "LONGEST",
    "Calls",
    "Group",
    "Period",
    "Spread",
    "Tally",
    "Usage",
    "percentiles",
    "usage",
]


@dataclass
class Usage:
    """Everything the Usage page shows for one period and kind."""

    period: Period
    kind: str
    priced: bool
    days: dict[date, Tally]
    day_calls: dict[date, Calls]
    day_latency: dict[date, dict[int, float]]
    day_call_latency: dict[date, dict[int, float]]
    total: Tally
    total_calls: Calls
    latency: dict[int, float]
    call_latency: dict[int, float]
    models: list[Group[Tally]] = field(default_factory=list)
    users: list[Group[Tally]] = field(default_factory=list)
    agents: list[Group[Tally]] = field(default_factory=list)
    tools: list[Group[Calls]] = field(default_factory=list)
    run_sample: int = 1
    """Percentiles of runs read every this many (1: all of them); of tool calls, below."""
    call_sample: int = 1


def usage(period: Period, kind: str = "all", prices: Mapping[str, Price] | None = None) -> Usage:
    """The page's figures in six queries, whatever the period's length: runs grouped by day,
    purpose and model (days, totals and models come from it), their percentiles by day, in all
    and by model, runs by user and by agent version; tool calls grouped by day and tool, and
    their percentiles by day, in all and by tool."""
    prices = settings.AGENTLAB_MODEL_PRICES if prices is None else prices
    runs = runs_in(period, kind).annotate(day=Day("started_at", period))
    calls = calls_in(period, kind).annotate(day=Day("run__started_at", period))
    days: dict[date, Tally] = {day: Tally() for day in period.days}
    total = Tally()
    rows = list(tallied(runs, "day"))
    for row in rows:
        price = prices.get(row["model"])
        days[row["day"]].add(row, price)
        total.add(row, price)
    run_step = every(total.runs)
    spread = percentiles(
        runs, "duration", {"day": ["day"], "all": [], "model": ["model"]}, run_step
    )
    day_calls: dict[date, Calls] = {day: Calls() for day in period.days}
    total_calls = Calls()
    tool_rows = list(counted_calls(calls, "day", "name", "server"))
    for row in tool_rows:
        day_calls[row["day"]].add(row)
        total_calls.add(row)
    call_step = every(total_calls.calls)
    calls_spread = percentiles(
        calls, "duration", {"day": ["day"], "all": [], "tool": ["name", "server"]}, call_step
    )
    return Usage(
        period=period,
        kind=kind,
        priced=bool(prices),
        days=days,
        day_calls=day_calls,
        day_latency={key[0]: found for key, found in spread["day"].items()},
        day_call_latency={key[0]: found for key, found in calls_spread["day"].items()},
        total=total,
        total_calls=total_calls,
        latency=spread["all"].get((), {}),
        call_latency=calls_spread["all"].get((), {}),
        models=by_model(rows, spread["model"], prices),
        users=by_user(runs, prices),
        agents=by_agent(runs, prices),
        tools=by_tool(tool_rows, calls_spread["tool"]),
        run_sample=run_step,
        call_sample=call_step,
    )
