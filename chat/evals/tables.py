"""The evaluation page's table: one row per case ("2/3 passed"), its attempts folded under it,
filled as results arrive."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from chat.evals import compare
from chat.evals.outcomes import Attempts
from chat.models import Case, EvalResult, EvalRun

DECIDED_CHARS = 2000
"""The longest decision a row shows (the attempt's own is whole under Inspect)."""


@dataclass(frozen=True)
class Slot:
    """One attempt at one case: its result, or none yet (waiting, or never made: stopped)."""

    key: str
    case_title: str
    attempt: int
    expected_text: str
    result: EvalResult | None = None


@dataclass
class CaseRow(Attempts):
    """One case of an evaluation: its slots, and the attempts made so far (`Attempts` says
    what they come to)."""

    key: str
    title: str
    expected_text: str
    slots: list[Slot]
    active: bool
    attempts: list[EvalResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.attempts = [slot.result for slot in self.slots if slot.result is not None]

    @property
    def missing(self) -> int:
        """Attempts without a result: still to come (`active`), or never made (stopped)."""
        return len(self.slots) - len(self.attempts)

    @property
    def state(self) -> str:
        """What the row's verdict shows: the case's verdict once an attempt is in, else
        "waiting" or "not-run"."""
        if self.attempts:
            return self.verdict
        return "waiting" if self.active else "not-run"

    @property
    def tally_text(self) -> str:
        """ "2/3 passed": the attempts passed of those planned (one attempt shows its verdict)."""
        return f"{self.passed}/{len(self.slots)} passed"

    @property
    def folded(self) -> bool:
        """Whether the attempts are listed under the row: when there is more than one."""
        return len(self.slots) > 1

    @property
    def decided(self) -> str:
        """The decision made; when attempts differ, each with how many made it."""
        return self.got_text(DECIDED_CHARS)

    @property
    def single(self) -> EvalResult | None:
        """The one attempt of a case replayed once."""
        return self.attempts[0] if len(self.slots) == 1 and self.attempts else None


@dataclass
class Table:
    eval_run: EvalRun
    rows: list[CaseRow]
    planned: bool
    """Whether the slots of attempts still to come are known (`compare.covered_cases`)."""

    @property
    def tally(self) -> compare.Tally:
        return compare.Tally.of(self.eval_run)

    def row(self, key: str) -> CaseRow | None:
        return next((row for row in self.rows if row.key == key), None)


def slot_key(case_id: int | None, attempt: int, result: EvalResult | None = None) -> str:
    if case_id is None:
        return f"r{result.pk if result else 0}"
    return f"c{case_id}-{attempt}"


def slot_of(result: EvalResult) -> Slot:
    key = slot_key(result.case_id, result.attempt, result)
    return Slot(key, result.case_title, result.attempt, result.expected_text, result)


def row_key(result: EvalResult) -> str:
    """The key of the row a result goes in (`compare.row_key`: its case, or itself)."""
    return compare.row_key(result.case_id, result)


def table(eval_run: EvalRun) -> Table:
    """Every case of an evaluation in case order, each with its attempts in order; results of
    cases deleted since come last, a row per title."""
    found = list(eval_run.results.select_related("run").order_by("case_id", "attempt", "pk"))
    compare.with_answers(found)
    planned: Sequence[Case] | None = compare.covered_cases(eval_run)
    active = eval_run.is_active
    by_slot = {(result.case_id, result.attempt): result for result in found}
    rows = []
    if planned is not None:
        for case in planned:
            slots = [
                Slot(
                    slot_key(case.pk, n),
                    case.title,
                    n,
                    case.expected_text,
                    by_slot.pop((case.pk, n), None),
                )
                for n in range(1, eval_run.repeat + 1)
            ]
            rows.append(CaseRow(f"c{case.pk}", case.title, case.expected_text, slots, active))
    grouped: dict[str, CaseRow] = {}
    for result in by_slot.values():
        key = row_key(result) if result.case_id is not None else f"t{result.case_title}"
        row = grouped.get(key)
        if row is None:
            row = CaseRow(row_key(result), result.case_title, result.expected_text, [], active)
            grouped[key] = row
        row.slots.append(slot_of(result))
        row.attempts.append(result)
    rows += grouped.values()
    return Table(eval_run, rows, planned=planned is not None)
