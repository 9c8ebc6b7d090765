"""The evaluation page's table: one slot per case and attempt, filled as results arrive."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chat.evals import compare
from chat.models import Case, EvalResult, EvalRun


@dataclass(frozen=True)
class Slot:
    """One attempt at one case: its result, or none yet (waiting, or never made: stopped)."""

    key: str
    case_title: str
    attempt: int
    expected_text: str
    result: EvalResult | None = None


@dataclass
class Table:
    eval_run: EvalRun
    slots: list[Slot]
    planned: bool
    """Whether the slots of attempts still to come are known (`compare.covered_cases`)."""

    @property
    def tally(self) -> compare.Tally:
        return compare.Tally.of(self.eval_run)


def slot_key(case_id: int | None, attempt: int, result: EvalResult | None = None) -> str:
    if case_id is None:
        return f"r{result.pk if result else 0}"
    return f"c{case_id}-{attempt}"


def slot_of(result: EvalResult) -> Slot:
    key = slot_key(result.case_id, result.attempt, result)
    return Slot(key, result.case_title, result.attempt, result.expected_text, result)


def table(eval_run: EvalRun) -> Table:
    """Every slot of an evaluation in case order, then attempt; results of cases deleted
    since come last."""
    found = list(eval_run.results.select_related("run").order_by("case_id", "attempt", "pk"))
    planned: Sequence[Case] | None = compare.covered_cases(eval_run)
    if planned is None:
        return Table(eval_run, [slot_of(result) for result in found], planned=False)
    by_slot = {(result.case_id, result.attempt): result for result in found}
    slots = [
        Slot(
            slot_key(case.pk, n), case.title, n, case.expected_text, by_slot.pop((case.pk, n), None)
        )
        for case in planned
        for n in range(1, eval_run.repeat + 1)
    ]
    slots += [slot_of(result) for result in by_slot.values()]
    return Table(eval_run, slots, planned=True)
