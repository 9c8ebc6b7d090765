"""Server CPU: the daphne processes' CPU time (user + system, all threads) around each phase.

A reading is the process's CPU clock (`clock_gettime` on the clock id Linux derives from a pid:
nanoseconds, every thread including finished ones); where that clock cannot be read it is
`utime + stime` from `/proc/<pid>/stat`, whose unit is a clock tick (10 ms here), too coarse for
a few short replies. Both are user + system time of the whole process.

A relayed round is read twice over: from the first message sent until the processes are quiet
after the last done frame ("runs"), and from before the sockets connect until they are quiet
after the sockets closed ("round"; the difference is the sockets' open and close). The fixed cost
of a run's start and finish and its cost per token come from a least-squares line through the
(tokens, CPU) of every round at concurrency 1, short replies and full ones:
cpu = fixed + per_token x tokens.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CPUCLOCK_SCHED = 2
"""Linux's process CPU clock of a pid: ((~pid) << 3) | CPUCLOCK_SCHED (user + system, in ns)."""

QUIET_INTERVAL = 0.01
QUIET_SHARE = 0.1
"""Quiet: the processes used less than this share of one CPU over a QUIET_INTERVAL."""
QUIET_LIMIT = 3.0


def process_clock(pid: int) -> int:
    """The clock id of a process's CPU time (Linux's MAKE_PROCESS_CPUCLOCK)."""
    return ((~pid) << 3) | CPUCLOCK_SCHED


def parse_stat(line: str, ticks_per_second: int) -> float:
    """User + system seconds from a /proc/<pid>/stat line.

    The command name (field 2) is in parentheses and may hold spaces and parentheses itself, so
    the fields are counted from the last ')': utime and stime are fields 14 and 15.
    """
    rest = line[line.rindex(")") + 2 :].split()
    utime, stime = int(rest[11]), int(rest[12])
    return (utime + stime) / ticks_per_second


def stat_seconds(pid: int) -> float:
    line = Path(f"/proc/{pid}/stat").read_text()
    return parse_stat(line, os.sysconf("SC_CLK_TCK"))


def clock_seconds(pid: int) -> float:
    return time.clock_gettime(process_clock(pid))


def cpu_source(pid: int) -> str:
    """Which reading works for pid: "clock" (its process CPU clock) or "proc" (/proc stat)."""
    try:
        clock_seconds(pid)
    except OSError:
        return "proc"
    return "clock"


class CpuMeter:
    """Reads the CPU seconds of a set of processes."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = list(pids)
        self.source = cpu_source(self.pids[0]) if self.pids else "proc"

    def read(self) -> dict[int, float]:
        read = clock_seconds if self.source == "clock" else stat_seconds
        readings = {}
        for pid in self.pids:
            try:
                readings[pid] = read(pid)
            except OSError:
                readings[pid] = 0.0
        return readings

    async def quiet(self) -> dict[int, float]:
        """The reading once the processes have gone quiet: at the start of the first interval
        in which together they used less than QUIET_SHARE of a CPU (or after QUIET_LIMIT)."""
        deadline = time.monotonic() + QUIET_LIMIT
        last = self.read()
        while time.monotonic() < deadline:
            await asyncio.sleep(QUIET_INTERVAL)
            now = self.read()
            if total(now) - total(last) < QUIET_INTERVAL * QUIET_SHARE:
                return last
            last = now
        return last

    def quiet_sync(self) -> dict[int, float]:
        return asyncio.run(self.quiet())

    def idle_rate(self, seconds: float = 1.0) -> float:
        """CPU seconds per second the processes use while nothing is asked of them."""
        before, started = self.read(), time.monotonic()
        time.sleep(seconds)
        after, elapsed = self.read(), time.monotonic() - started
        return (total(after) - total(before)) / elapsed


def total(reading: dict[int, float]) -> float:
    return sum(reading.values())


def used(before: dict[int, float], after: dict[int, float]) -> dict[int, float]:
    return {pid: after.get(pid, 0.0) - before.get(pid, 0.0) for pid in before}


@dataclass
class CpuTally:
    """CPU of the relayed rounds of one phase: per round, its runs, tokens and seconds."""

    runs_seconds: dict[int, float] = field(default_factory=dict)
    round_seconds: float = 0.0
    runs: int = 0
    tokens: int = 0
    points: list[tuple[float, float]] = field(default_factory=list)
    """(tokens per run, CPU seconds per run) of every round."""

    def add(self, runs: dict[int, float], round_seconds: float, replies: int, tokens: int) -> None:
        for pid, seconds in runs.items():
            self.runs_seconds[pid] = self.runs_seconds.get(pid, 0.0) + seconds
        self.round_seconds += round_seconds
        self.runs += replies
        self.tokens += tokens
        if replies:
            self.points.append((tokens / replies, sum(runs.values()) / replies))

    @property
    def seconds(self) -> float:
        return sum(self.runs_seconds.values())


def linear_fit(points: Iterable[tuple[float, float]]) -> tuple[float, float] | None:
    """Least squares y = intercept + slope * x; None without two distinct x."""
    pairs = list(points)
    if len({x for x, _ in pairs}) < 2:
        return None
    n = len(pairs)
    mean_x = sum(x for x, _ in pairs) / n
    mean_y = sum(y for _, y in pairs) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in pairs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in pairs)
    slope = sxy / sxx
    return mean_y - slope * mean_x, slope


def tally_figures(tally: CpuTally, fixed_ms: float | None = None) -> dict[str, Any]:
    """A phase's CPU in the report's units: ms per run, µs per relayed token.

    us_per_token_beyond_fixed: what is left per token once the fixed cost of a run's start and
    finish (measured at concurrency 1) is taken off every run.
    """
    ms = tally.seconds * 1000
    per_run = ms / tally.runs if tally.runs else None
    beyond = None
    if per_run is not None and fixed_ms is not None and tally.tokens:
        beyond = (per_run - fixed_ms) * tally.runs / tally.tokens * 1000
    return {
        "ms": ms,
        "runs": tally.runs,
        "tokens": tally.tokens,
        "ms_per_run": per_run,
        "us_per_token": ms / tally.tokens * 1000 if tally.tokens else None,
        "us_per_token_beyond_fixed": beyond,
        "sockets_ms_per_run": (
            (tally.round_seconds * 1000 - ms) / tally.runs if tally.runs else None
        ),
        "by_process_ms": {str(pid): seconds * 1000 for pid, seconds in tally.runs_seconds.items()},
    }


def fit_figures(points: Sequence[tuple[float, float]], reference_tokens: int) -> dict[str, Any]:
    """The fixed cost per run (ms) and the cost per token (µs) from (tokens, seconds) points,
    and what a reply of reference_tokens costs by that line, with standard errors.

    credible: the cost per token is more than two standard errors above zero (with only two
    points, above zero), so the line can be read off at other lengths.
    """
    fit = linear_fit(points)
    lengths = sorted({int(x) for x, _ in points})
    if fit is None:
        return {
            "fixed_ms": None, "us_per_token": None, "points": len(points), "tokens": lengths,
            "credible": False,
        }  # fmt: skip
    intercept, slope = fit
    slope_se, reference_se = _standard_errors(points, intercept, slope, reference_tokens)
    credible = slope > 0 if slope_se is None else slope > 2 * slope_se
    return {
        "fixed_ms": intercept * 1000,
        "us_per_token": slope * 1e6,
        "us_per_token_se": None if slope_se is None else slope_se * 1e6,
        "points": len(points),
        "tokens": lengths,
        "reference_tokens": reference_tokens,
        "ms_per_reference_reply": (intercept + slope * reference_tokens) * 1000,
        "ms_per_reference_reply_se": None if reference_se is None else reference_se * 1000,
        "residual_ms": _residual(points, intercept, slope) * 1000,
        "credible": credible,
    }


def _standard_errors(
    points: Sequence[tuple[float, float]], intercept: float, slope: float, at: float
) -> tuple[float | None, float | None]:
    """Standard errors of the slope and of the line's value at x=at (None for 2 points)."""
    n = len(points)
    if n <= 2:
        return None, None
    mean_x = sum(x for x, _ in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    variance = sum((y - intercept - slope * x) ** 2 for x, y in points) / (n - 2)
    slope_se = (variance / sxx) ** 0.5
    value_se = (variance * (1 / n + (at - mean_x) ** 2 / sxx)) ** 0.5
    return float(slope_se), float(value_se)


def _residual(points: Sequence[tuple[float, float]], intercept: float, slope: float) -> float:
    """Root mean square distance of the points from the line."""
    squares = [(y - intercept - slope * x) ** 2 for x, y in points]
    return float((sum(squares) / len(squares)) ** 0.5)


def scaled_reply_ms(
    ms_per_run: float | None, tokens: int, fixed_ms: float | None, reference_tokens: int
) -> float | None:
    """A run's CPU scaled to a reply of reference_tokens: the fixed part as measured at
    concurrency 1, the rest in proportion to the tokens."""
    if ms_per_run is None or fixed_ms is None or not tokens:
        return None
    return fixed_ms + (ms_per_run - fixed_ms) * reference_tokens / tokens
