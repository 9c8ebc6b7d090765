"""Percentiles, reply timings and the token check (lost, duplicated, reordered) of the benchmark."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

_WORD = re.compile(r"t(\d+)")


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation; None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Iterable[float | None]) -> dict[str, Any]:
    """n, p50, p99, mean and max of the values that are not None."""
    present = [value for value in values if value is not None]
    if not present:
        return {"n": 0, "p50": None, "p99": None, "mean": None, "max": None}
    return {
        "n": len(present),
        "p50": percentile(present, 50),
        "p99": percentile(present, 99),
        "mean": sum(present) / len(present),
        "max": max(present),
    }


class Timed:
    """A reply's times on the monotonic clock: request sent, first token, completed."""

    sent_at: float
    first_token: float | None
    completed: float | None

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.sent_at

    @property
    def total(self) -> float | None:
        return None if self.completed is None else self.completed - self.sent_at


def wall(replies: Sequence[Timed]) -> float:
    """From the first request sent to the last reply completed (0 when none completed)."""
    ends = [reply.completed for reply in replies if reply.completed is not None]
    return (max(ends) - min(reply.sent_at for reply in replies)) if ends else 0.0


@dataclass
class TokenCheck:
    """How a received text differs from the provider's "t0 t1 ... tN-1"."""

    expected: int
    received: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    garbled: int = 0
    exact: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def ok(self) -> bool:
        return self.exact and not (self.lost or self.duplicated or self.reordered or self.garbled)


def check_tokens(text: str, expected: int) -> TokenCheck:
    """Compare a received reply with the expected numbered words.

    lost: numbers never seen; duplicated: extra occurrences; reordered: places where a number
    arrives after a larger one (first occurrences only); garbled: words that are not "t<n>" for
    an n in range (a split or merged token); exact: the words are the expected ones in order
    (whitespace aside: the page renders the reply's paragraphs).
    """
    check = TokenCheck(expected=expected)
    numbers: list[int] = []
    for word in text.split():
        match = _WORD.fullmatch(word)
        if match is None or int(match.group(1)) >= expected:
            check.garbled += 1
        else:
            numbers.append(int(match.group(1)))
    check.received = len(numbers)
    seen: set[int] = set()
    firsts: list[int] = []
    for number in numbers:
        if number in seen:
            check.duplicated += 1
        else:
            seen.add(number)
            firsts.append(number)
    check.lost = expected - len(seen)
    check.reordered = sum(1 for a, b in itertools.pairwise(firsts) if b < a)
    check.exact = text.split() == [f"t{i}" for i in range(expected)]
    return check


def total_checks(checks: Iterable[TokenCheck]) -> dict[str, int]:
    """Totals over many replies: lost, duplicated, reordered, garbled, inexact replies."""
    totals = {"replies": 0, "lost": 0, "duplicated": 0, "reordered": 0, "garbled": 0, "inexact": 0}
    for check in checks:
        totals["replies"] += 1
        totals["lost"] += check.lost
        totals["duplicated"] += check.duplicated
        totals["reordered"] += check.reordered
        totals["garbled"] += check.garbled
        totals["inexact"] += 0 if check.exact else 1
    return totals
