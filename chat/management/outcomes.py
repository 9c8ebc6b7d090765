"""The report of an evaluation the terminal prints or writes as JSON, a case at a time
(`chat.evals.outcomes` says what a case's attempts come to)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from chat.agent import decisions
from chat.evals.outcomes import Attempts
from chat.management.terminal import plural
from chat.models import Case, EvalResult, EvalRun, ResultVerdict


@dataclass(frozen=True)
class Outcome(Attempts):
    """One case of an evaluation and its attempts (`Attempts` says how they come to one)."""

    case: Case
    attempts: list[EvalResult]


def verdict_text(outcome: Outcome) -> str:
    if len(outcome.attempts) == 1:
        return str(outcome.attempts[0].verdict)
    return f"{outcome.passed}/{len(outcome.attempts)} passed"


def summary_line(eval_run: EvalRun, outcomes: list[Outcome], *, seconds: float) -> str:
    """`3 cases, 5 attempts: 4 passed, 1 failed (80%) on MODEL in 1.2 s; eval run 12`."""
    attempts = [result for outcome in outcomes for result in outcome.attempts]
    counts = Counter(result.verdict for result in attempts)
    tally = f"{counts[ResultVerdict.PASSED]} passed, {counts[ResultVerdict.FAILED]} failed"
    if counts[ResultVerdict.ERROR]:
        tally += f", {plural(counts[ResultVerdict.ERROR], 'error')}"
    rate = f" ({100 * counts[ResultVerdict.PASSED] / len(attempts):.0f}%)" if attempts else ""
    return (
        f"{plural(len(outcomes), 'case')}, {plural(len(attempts), 'attempt')}: {tally}{rate} "
        f"on {eval_run.label} in {seconds:.1f} s; eval run {eval_run.pk}"
    )


def report(eval_run: EvalRun, outcomes: list[Outcome], *, seconds: float) -> dict[str, Any]:
    """The evaluation as one JSON document (--json, --output); `passed` and `failed` count
    cases, each attempt carries its own verdict."""
    passed = sum(1 for outcome in outcomes if outcome.verdict == ResultVerdict.PASSED)
    return {
        "eval_run": eval_run.pk,
        "model": eval_run.model,
        "label": eval_run.label,
        "agent": str(eval_run.agent_version) if eval_run.agent_version else None,
        "set": eval_run.set_name,
        "repeat": eval_run.repeat,
        "continue": eval_run.continue_loop,
        "status": eval_run.status,
        "rule": decisions.RULE,
        "cases": [_case_report(outcome) for outcome in outcomes],
        "passed": passed,
        "failed": len(outcomes) - passed,
        "duration": round(seconds, 3),
    }


def _case_report(outcome: Outcome) -> dict[str, Any]:
    case = outcome.case
    return {
        "case": f"{case.case_set.name} #{case.pk}",
        "case_id": case.pk,
        "title": case.title,
        "verdict": outcome.verdict,
        "expected": case.expected,
        "got": outcome.got,
        "attempts": [
            {
                "attempt": result.attempt,
                "verdict": result.verdict,
                "reason": result.reason,
                "got": result.got,
                "answer": result.answer,
                "latency": result.latency,
                "prompt_tokens": result.prompt_tokens,
                "completion_tokens": result.completion_tokens,
                "gated_calls": result.gated_calls,
                "run": result.run_id,
            }
            for result in outcome.attempts
        ],
        "pass_rate": outcome.pass_rate,
        "latency": outcome.latency,
        "tokens": outcome.tokens,
        "reason": outcome.reason,
    }
