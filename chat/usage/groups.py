"""The Usage page's breakdowns: by model, user, agent version and tool, busiest first."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from chat.models import Run
from chat.prices import Price

from .sums import Calls, Tally, tallied


@dataclass
class Group[T: (Tally, Calls)]:
    """A line of a breakdown: its name, what its runs or calls used, their percentiles."""

    name: str
    tally: T
    p50: float | None = None
    p95: float | None = None
    detail: str = ""


SHOWN = 100
"""Lines of a breakdown shown, busiest first."""


def folded(
    rows: Iterable[Mapping[str, Any]], key: str, prices: Mapping[str, Price]
) -> dict[Any, Tally]:
    found: dict[Any, Tally] = defaultdict(Tally)
    for row in rows:
        found[row[key]].add(row, prices.get(row["model"]))
    return found


def busiest[T: (Tally, Calls)](groups: Iterable[Group[T]]) -> list[Group[T]]:
    """The groups with the most runs (or calls) first, then by name; at most SHOWN."""

    def weight(group: Group[T]) -> tuple[int, str]:
        tally = group.tally
        return (-(tally.runs if isinstance(tally, Tally) else tally.calls), group.name)

    return sorted(groups, key=weight)[:SHOWN]


def by_model(
    rows: Iterable[Mapping[str, Any]],
    spread: Mapping[tuple[Any, ...], dict[int, float]],
    prices: Mapping[str, Price],
) -> list[Group[Tally]]:
    """From the runs' rows grouped by (at least) model, and their percentiles by model."""
    from chat.agent.scripted import SCRIPTED_LABEL, SCRIPTED_MODEL

    groups: list[Group[Tally]] = []
    for model, tally in folded(rows, "model", prices).items():
        name = SCRIPTED_LABEL if model == SCRIPTED_MODEL else model or "(no model recorded)"
        found = spread.get((model,), {})
        detail = "" if model in prices else "no price set" if prices else ""
        groups.append(Group(name, tally, found.get(50), found.get(95), detail))
    return busiest(groups)


def by_user(runs: QuerySet[Run], prices: Mapping[str, Price]) -> list[Group[Tally]]:
    rows = tallied(runs, "created_by__username")
    return busiest(
        Group(name or "(no user)", tally)
        for name, tally in folded(rows, "created_by__username", prices).items()
    )


def by_agent(runs: QuerySet[Run], prices: Mapping[str, Price]) -> list[Group[Tally]]:
    name = "conversation__agent_version__agent__name"
    number = "conversation__agent_version__number"
    names: dict[Any, str] = {}
    rows = []
    for row in tallied(runs, "conversation__agent_version", name, number):
        version = row["conversation__agent_version"]
        names[version] = f"{row[name]} v{row[number]}" if version else "Default"
        rows.append(row)
    return busiest(
        Group(names[version], tally)
        for version, tally in folded(rows, "conversation__agent_version", prices).items()
    )


def by_tool(
    rows: Iterable[Mapping[str, Any]], spread: Mapping[tuple[Any, ...], dict[int, float]]
) -> list[Group[Calls]]:
    """From the tool calls' rows grouped by (at least) name and server, and their percentiles
    by tool."""
    from chat.agent.tools import humanize

    tallies: dict[tuple[str, str], Calls] = defaultdict(Calls)
    for row in rows:
        tallies[row["name"], row["server"]].add(row)
    groups: list[Group[Calls]] = []
    for (name, server), tally in tallies.items():
        found = spread.get((name, server), {})
        detail = f"{name} · {f'MCP server {server}' if server else 'built in'}"
        groups.append(Group(humanize(name), tally, found.get(50), found.get(95), detail))
    return busiest(groups)
