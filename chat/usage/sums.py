"""The sums behind the Usage page: a period of days, runs and tool calls grouped in the
database, exact percentiles by SQL windows (the package's docstring says why)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from decimal import Decimal
from typing import Any

from django.db.models import (
    Count,
    ExpressionWrapper,
    F,
    IntegerField,
    Q,
    QuerySet,
    Sum,
    Window,
)
from django.db.models.expressions import RowRange
from django.db.models.functions import RowNumber, TruncDate
from django.utils import timezone

from chat.models import Purpose, Run, RunStatus, ToolCall, ToolCallStatus, ToolFailure
from chat.prices import Price

FAILED = (RunStatus.FAILED, RunStatus.INTERRUPTED)
"""A run that did not finish its answer, through nobody's choice (a Stop is a choice)."""
TOOL_ERROR = Q(status=ToolCallStatus.FAILED) & ~Q(failure=ToolFailure.DENIED)
"""A tool call that failed: a person's denial is a decision, not an error."""
FINISHED_CALL = Q(status__in=(ToolCallStatus.COMPLETED, ToolCallStatus.FAILED))
"""The calls an error rate counts: those that ended, not those stopped or still running."""
PERCENTS = (50, 95)
KINDS = ("all", Purpose.CHAT.value, Purpose.EVAL.value)
"""What a page shows: every run, chats only, or evaluations' replays only."""
LONGEST = 366
"""The most days one page shows: a year, leap day included."""


@dataclass(frozen=True)
class Period:
    """Whole days, `first` to `last` included, in `zone`."""

    first: date
    last: date
    zone: tzinfo

    @classmethod
    def recent(cls, days: int = 30) -> Period:
        """The last `days` days, today included, in the server's time zone."""
        today = timezone.localdate()
        return cls(today - timedelta(days=days - 1), today, timezone.get_current_timezone())

    @property
    def days(self) -> list[date]:
        return [self.first + timedelta(days=n) for n in range((self.last - self.first).days + 1)]

    def moment(self, day: date) -> datetime:
        return datetime.combine(day, time(), tzinfo=self.zone)

    @property
    def start(self) -> datetime:
        return self.moment(self.first)

    @property
    def end(self) -> datetime:
        return self.moment(self.last + timedelta(days=1))

    @property
    def offset(self) -> int | None:
        """The zone's offset from UTC in seconds when it is the same all period (UTC, or no
        daylight-saving change in it); None otherwise."""
        found = {self.moment(day).utcoffset() for day in [*self.days, self.last + timedelta(1)]}
        only = found.pop() if len(found) == 1 else None
        return None if only is None else int(only.total_seconds())


class Day(TruncDate):
    """The local date of a moment. On SQLite, TruncDate calls a Python function for every row;
    where the period's offset is fixed, SQLite's own date() does the same in C."""

    def __init__(self, expression: str, period: Period) -> None:
        super().__init__(expression, tzinfo=period.zone)
        self.fixed = period.offset

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        if self.fixed is None:
            return self.as_sql(compiler, connection, **extra)
        sql, params = compiler.compile(self.lhs)
        return f"date({sql}, %s)", (*params, f"{self.fixed:+d} seconds")


def runs_in(period: Period, kind: str) -> QuerySet[Run]:
    """The runs started in the period, of chats, evaluations or both (`kind`)."""
    runs = Run.objects.filter(started_at__gte=period.start, started_at__lt=period.end)
    return runs if kind == "all" else runs.filter(conversation__purpose=kind)


def calls_in(period: Period, kind: str) -> QuerySet[ToolCall]:
    """The tool calls of `runs_in(period, kind)`, counted on their run's day. Chosen by their
    run's id among those runs (not by a join's condition alone): SQLite then reads the period's
    runs and their calls by index, rather than every tool call ever made."""
    return ToolCall.objects.filter(run__in=runs_in(period, kind).values("pk"))


Spread = dict[str, dict[tuple[Any, ...], dict[int, float]]]
"""Percentiles by grouping name, then by group: {"day": {(day,): {50: 1.2, 95: 8.0}}}."""


SAMPLE = 40_000
"""The most rows percentiles are worked out from: past it, a sample of every k-th row."""


def every(rows: int) -> int:
    """Which rows of `rows` the percentiles read: every one up to SAMPLE, else every k-th, so
    that about SAMPLE are read."""
    return max(1, -(-rows // SAMPLE))


def percentiles(
    rows: QuerySet[Any], value: str, groupings: Mapping[str, Sequence[str]], step: int = 1
) -> Spread:
    """p50 and p95 (nearest rank) of `value` in each group of each grouping (names of fields
    or annotations; an empty one is all rows), in one query: a row's place in its group and the
    group's size are windows over one ordering (so the database sorts once per grouping), and
    only the rows at ceil(p * n) come back. Rows without a value are left out; with `step`
    above 1, only rows whose id is a multiple of it are read (ids follow creation, not
    duration, so that is a fair sample of every day and every tool)."""
    ranked = rows.order_by().filter(**{f"{value}__isnull": False})
    if step > 1:
        slot = ExpressionWrapper(F("pk") % step, output_field=IntegerField())
        ranked = ranked.annotate(slot=slot).filter(slot=0)
    wanted = Q()
    every = RowRange(start=None, end=None)
    for name, by in groupings.items():
        partition = [F(field) for field in by] or None
        order = [F(value).asc(), F("pk").asc()]
        ranked = ranked.annotate(
            **{
                f"{name}_place": Window(RowNumber(), partition_by=partition, order_by=order),
                f"{name}_size": Window(
                    Count("pk"), partition_by=partition, order_by=order, frame=every
                ),
            }
        )
        for percent in PERCENTS:
            rank = (F(f"{name}_size") * percent + 99) / 100
            wanted |= Q(**{f"{name}_place": ExpressionWrapper(rank, output_field=IntegerField())})
    fields = list(dict.fromkeys(field for by in groupings.values() for field in by))
    names = [f"{name}_{part}" for name in groupings for part in ("place", "size")]
    found: Spread = {name: defaultdict(dict) for name in groupings}
    for row in ranked.filter(wanted).values(*fields, *names, value):
        for name, by in groupings.items():
            place, size = row[f"{name}_place"], row[f"{name}_size"]
            for percent in PERCENTS:
                if place == (size * percent + 99) // 100:
                    found[name][tuple(row[field] for field in by)][percent] = row[value]
    return {name: dict(groups) for name, groups in found.items()}


@dataclass
class Tally:
    """Runs and what they used, summed over a day, a model, a user or an agent version."""

    runs: int = 0
    chats: int = 0
    evals: int = 0
    failed: int = 0
    chat_failed: int = 0
    eval_failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    chat_tokens: int = 0
    eval_tokens: int = 0
    cost: Decimal | None = None
    chat_cost: Decimal | None = None
    eval_cost: Decimal | None = None
    unpriced_tokens: int = 0
    seconds: float = 0.0
    timed: int = 0

    @property
    def tokens(self) -> int:
        return self.chat_tokens + self.eval_tokens

    @property
    def failure_rate(self) -> float | None:
        return self.failed / self.runs if self.runs else None

    @property
    def mean_seconds(self) -> float | None:
        return self.seconds / self.timed if self.timed else None

    def add(self, row: Mapping[str, Any], price: Price | None) -> None:
        """One aggregated row of runs of one purpose and one model."""
        chat = row["conversation__purpose"] == Purpose.CHAT
        tokens = row["tokens"] or 0
        self.runs += row["runs"]
        self.failed += row["failed"]
        self.prompt_tokens += row["prompt"] or 0
        self.completion_tokens += row["completion"] or 0
        self.seconds += row["seconds"] or 0.0
        self.timed += row["timed"]
        if chat:
            self.chats += row["runs"]
            self.chat_failed += row["failed"]
            self.chat_tokens += tokens
        else:
            self.evals += row["runs"]
            self.eval_failed += row["failed"]
            self.eval_tokens += tokens
        if price is None:
            self.unpriced_tokens += tokens
            return
        cost = price.cost(row["prompt"] or 0, row["completion"] or 0)
        self.cost = (self.cost or Decimal(0)) + cost
        if chat:
            self.chat_cost = (self.chat_cost or Decimal(0)) + cost
        else:
            self.eval_cost = (self.eval_cost or Decimal(0)) + cost


def tallied(runs: QuerySet[Run], *by: Any, **named: Any) -> QuerySet[Any]:
    """Runs grouped by purpose, model and `by`: counts, failures, tokens and durations."""
    grouped: QuerySet[Any] = (
        runs.annotate(**named)
        .values(*by, *named, "conversation__purpose", "model")
        .annotate(
            runs=Count("pk"),
            failed=Count("pk", filter=Q(status__in=FAILED)),
            prompt=Sum("prompt_tokens"),
            completion=Sum("completion_tokens"),
            tokens=Sum("total_tokens"),
            seconds=Sum("duration"),
            timed=Count("duration"),
        )
        .order_by()
    )
    return grouped


@dataclass
class Calls:
    """Tool calls summed over a day or a tool."""

    calls: int = 0
    finished: int = 0
    errors: int = 0
    seconds: float = 0.0
    timed: int = 0

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.finished if self.finished else None

    @property
    def mean_seconds(self) -> float | None:
        return self.seconds / self.timed if self.timed else None

    def add(self, row: Mapping[str, Any]) -> None:
        self.calls += row["calls"]
        self.finished += row["finished"]
        self.errors += row["errors"]
        self.seconds += row["seconds"] or 0.0
        self.timed += row["timed"]


def counted_calls(calls: QuerySet[ToolCall], *by: Any, **named: Any) -> QuerySet[Any]:
    """Tool calls grouped by `by`: counts, those that ended, errors and durations."""
    grouped: QuerySet[Any] = (
        calls.annotate(**named)
        .values(*by, *named)
        .annotate(
            calls=Count("pk"),
            finished=Count("pk", filter=FINISHED_CALL),
            errors=Count("pk", filter=TOOL_ERROR),
            seconds=Sum("duration"),
            timed=Count("duration"),
        )
        .order_by()
    )
    return grouped
