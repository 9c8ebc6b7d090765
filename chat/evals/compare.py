"""Comparisons: the same cases replayed on two or three targets at once, and the matrix that
shows, per case, what each target decided, whether it passed, and where the targets differ.

One target may be the same model twice: a difference then shows that it does not decide the
same way every time.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import transaction

from chat.evals import cases, replay
from chat.evals.outcomes import Attempts
from chat.models import Case, CaseSet, Comparison, EvalResult, EvalRun, Message, ResultVerdict
from chat.runs import RunRefused

if TYPE_CHECKING:
    from chat.models import Conversation

MAX_TARGETS = 3
MAX_REPEAT = 5
LAST_TURN = "Last turn of “{title}”"
"""The set a comparison of a conversation's last turn keeps its case in."""

ReplayOne = Callable[[EvalRun, replay.Target], Awaitable[EvalRun]]


def covered_cases(eval_run: EvalRun) -> list[Case] | None:
    """The cases an evaluation replays: its set's cases made before it started (cases added
    to the set later are not in it). None when those do not account for its `total` (it ran
    a part of its set, or a case was deleted since): then only its results tell."""
    if eval_run.case_set_id is None:
        return None
    found = list(
        Case.objects.filter(
            case_set_id=eval_run.case_set_id, created_at__lte=eval_run.started_at
        ).order_by("pk")
    )
    return found if len(found) * eval_run.repeat == eval_run.total else None


@transaction.atomic
def create_comparison(
    cases_: Sequence[Case],
    targets: Sequence[replay.Target],
    *,
    user: Any,
    case_set: CaseSet,
    repeat: int = 1,
) -> tuple[Comparison, list[EvalRun]]:
    """A comparison and one evaluation per target (in the targets' order); RunRefused when the
    number of targets or attempts is out of bounds, or there is no case."""
    if not 2 <= len(targets) <= MAX_TARGETS:
        raise RunRefused(f"Compare 2 to {MAX_TARGETS} targets.")
    if not 1 <= repeat <= MAX_REPEAT:
        raise RunRefused(f"A comparison takes 1 to {MAX_REPEAT} attempts per case.")
    labels = " vs ".join(target.label for target in targets)
    comparison = Comparison.objects.create(
        title=f"{case_set.name}: {labels}"[:200],
        created_by=user if getattr(user, "is_authenticated", False) else None,
    )
    eval_runs = [
        replay.create_eval_run(
            cases_, target, user=user, case_set=case_set, repeat=repeat, comparison=comparison
        )
        for target in targets
    ]
    return comparison, eval_runs


async def run_comparison(
    eval_runs: Sequence[EvalRun],
    targets: Sequence[replay.Target],
    cases_: Sequence[Case],
    *,
    user: Any,
    replay_one: ReplayOne | None = None,
) -> list[EvalRun]:
    """Replay every target at once, each evaluation in a task of its own: stopping one (or a
    failure of one) leaves the others going; cancelling this stops them all."""

    async def plain(eval_run: EvalRun, target: replay.Target) -> EvalRun:
        return await replay.run_eval(eval_run, cases_, target, user=user)

    one = replay_one or plain
    await asyncio.gather(
        *(one(eval_run, target) for eval_run, target in zip(eval_runs, targets, strict=True)),
        return_exceptions=True,
    )
    return list(eval_runs)


@dataclass(frozen=True)
class Tally:
    """Passed, failed (errors included) and still to come, as the bars draw them."""

    passed: int
    failed: int
    total: int

    @classmethod
    def of(cls, *eval_runs: EvalRun) -> Tally:
        return cls(
            sum(run.passed for run in eval_runs),
            sum(run.failed for run in eval_runs),
            sum(run.total for run in eval_runs),
        )

    @property
    def done(self) -> int:
        return self.passed + self.failed

    @property
    def remaining(self) -> int:
        return max(0, self.total - self.done)

    @property
    def passed_width(self) -> str:
        """The passed part of a bar 100 wide (an SVG length: no inline style under the CSP)."""
        return f"{100 * self.passed / self.total:.2f}" if self.total else "0"

    @property
    def failed_width(self) -> str:
        return f"{100 * self.failed / self.total:.2f}" if self.total else "0"

    @property
    def summary(self) -> str:
        """What the bar says, for a screen reader."""
        text = f"{self.passed} passed, {self.failed} failed"
        return f"{text}, {self.remaining} not done" if self.remaining else text

    @property
    def rate(self) -> str:
        return f"{100 * self.passed / self.done:.0f}%" if self.done else "—"


@dataclass
class Column(Attempts):
    """One target of a comparison: its evaluation, numbered as it was chosen, and its
    attempts so far (their mean latency and tokens, `Attempts`)."""

    number: int
    eval_run: EvalRun
    attempts: list[EvalResult] = field(default_factory=list)

    @property
    def tally(self) -> Tally:
        return Tally.of(self.eval_run)


@dataclass
class Cell:
    """What one target decided on one case, attempt by attempt."""

    eval_run: EvalRun
    results: list[EvalResult] = field(default_factory=list)
    differs: bool = False

    @property
    def missing(self) -> int:
        """Attempts without a result: still to come, or never made (stopped)."""
        return max(0, self.eval_run.repeat - len(self.results))

    @property
    def waiting(self) -> bool:
        return self.eval_run.is_active


@dataclass
class Row:
    """One case across the targets, with the decision it expected."""

    key: str
    title: str
    expected_text: str
    cells: list[Cell]

    @property
    def differs(self) -> bool:
        return any(cell.differs for cell in self.cells)


@dataclass
class Matrix:
    comparison: Comparison
    columns: list[Column]
    rows: list[Row]
    planned: bool

    @property
    def is_active(self) -> bool:
        return any(column.eval_run.is_active for column in self.columns)

    @property
    def tally(self) -> Tally:
        return Tally.of(*(column.eval_run for column in self.columns))

    @property
    def differing(self) -> int:
        return sum(1 for row in self.rows if row.differs)


def decision_key(result: EvalResult) -> str | None:
    """What a result decided, comparable across targets; None for an attempt that decided
    nothing (an error): it is not a different decision, its verdict says what happened."""
    if result.verdict == ResultVerdict.ERROR or result.got is None:
        return None
    return json.dumps(result.got, sort_keys=True, ensure_ascii=False)


def with_answers(results: Sequence[EvalResult]) -> None:
    """Each result's final answer as shown: the one it stored (a replay that went on to it),
    else the text its run's last reply turn wrote (a first decision without a tool call is
    the answer). Set on the objects shown, never saved."""
    runs = [result.run_id for result in results if not result.answer and result.run_id]
    if not runs:
        return
    texts: dict[int, str] = {}
    turns = Message.objects.filter(
        run_id__in=runs, role=Message.Role.ASSISTANT, version__isnull=True
    ).order_by("run_id", "index")
    for run_id, content in turns.values_list("run_id", "content"):
        texts[run_id] = content or ""
    for result in results:
        if not result.answer and result.run_id:
            result.answer = texts.get(result.run_id, "")


def row_key(case_id: int | None, result: EvalResult | None) -> str:
    return f"c{case_id}" if case_id is not None else f"r{result.pk if result else 0}"


def matrix(comparison: Comparison) -> Matrix:
    """The comparison as a table: one row per case, one cell per target. A row differs when
    its attempts made more than one decision, across the targets or within one; every cell
    that decided something is then marked."""
    eval_runs = list(comparison.eval_runs.select_related("case_set").order_by("pk"))
    columns = [Column(number, run) for number, run in enumerate(eval_runs, start=1)]
    planned = covered_cases(eval_runs[0]) if eval_runs else None
    results = EvalResult.objects.filter(eval_run__in=eval_runs).select_related("run")
    by_run = {column.eval_run.pk: column for column in columns}
    by_row: dict[str, dict[int, list[EvalResult]]] = {}
    titles: dict[str, tuple[str, str]] = {}
    if planned is not None:
        for case in planned:
            key = row_key(case.pk, None)
            by_row[key] = {}
            titles[key] = (case.title, case.expected_text)
    orphans: dict[str, str] = {}
    found = list(results.order_by("case_id", "case_title", "attempt", "pk"))
    with_answers(found)
    for result in found:
        key = row_key(result.case_id, result)
        if result.case_id is None:
            # A case deleted since: its results share a row by title.
            key = orphans.setdefault(result.case_title, key)
        by_row.setdefault(key, {}).setdefault(result.eval_run_id, []).append(result)
        by_run[result.eval_run_id].attempts.append(result)
        titles.setdefault(key, (result.case_title, result.expected_text))
    rows = []
    for key, per_run in by_row.items():
        cells = [Cell(run, per_run.get(run.pk, [])) for run in eval_runs]
        decided = {
            decision
            for cell in cells
            for result in cell.results
            if (decision := decision_key(result)) is not None
        }
        if len(decided) > 1:
            for cell in cells:
                cell.differs = any(decision_key(result) for result in cell.results)
        title, expected = titles[key]
        rows.append(Row(key, title, expected, cells))
    return Matrix(comparison, columns, rows, planned is not None)


def last_turn_set_name(conversation: Conversation, number: int = 1) -> str:
    """`Last turn of “<title>”`, numbered from the second on, within a set name's length."""
    suffix = "" if number == 1 else f" ({number})"
    limit = CaseSet._meta.get_field("name").max_length or 100
    room = limit - len(LAST_TURN.format(title="")) - len(suffix)
    title = " ".join(str(conversation).split())
    if len(title) > room:
        title = title[: room - 1].rstrip() + "…"
    return LAST_TURN.format(title=title) + suffix


def last_turn_case(conversation: Conversation, *, user: Any) -> Case:
    """The case of a conversation's last reply: the moment before it, expecting what it called.

    Kept alone in a set of its own (`Last turn of “<title>”`), so that a comparison replays
    that turn only; comparing the same turn again reuses its case. CaseRefused when there is
    no finished reply to take.
    """
    if conversation.has_unfinished_run():
        raise cases.CaseRefused(
            "A reply is being written in this conversation: compare it once it is finished."
        )
    run = (
        conversation.runs.filter(
            messages__role=Message.Role.ASSISTANT, messages__version__isnull=True
        )
        .order_by("-started_at", "-pk")
        .distinct()
        .first()
    )
    if run is None:
        raise cases.CaseRefused("This conversation has no reply to compare yet.")
    at_message = cases.moment_of_reply(run)
    found = cases.moment(conversation, at_message)
    messages = cases.request_messages(conversation, found.rows)
    number = 1
    while True:
        name = last_turn_set_name(conversation, number)
        case_set = CaseSet.objects.filter(name=name).first()
        if case_set is None:
            return cases.save_case(conversation, at_message, set_name=name, user=user)
        kept = list(case_set.cases.all()[:2])
        if (
            len(kept) == 1
            and kept[0].conversation_id == conversation.pk
            and kept[0].at_message == at_message
            and kept[0].messages == messages
            and kept[0].expected == cases.stored_decision(found.reply)
        ):
            return kept[0]
        number += 1
