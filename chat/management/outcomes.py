"""What an evaluation comes to per case (its attempts, a verdict, the decision most made) and
the report the terminal prints or writes as JSON."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from chat.agent import decisions
from chat.agent.probes.report import clip
from chat.management.terminal import plural
from chat.models import Case, EvalResult, EvalRun, ResultVerdict


@dataclass(frozen=True)
class Outcome:
    """One case of an evaluation and its attempts. It passes when every attempt passed; it
    failed when an attempt decided otherwise; otherwise (attempts that only errored, or
    none made) it is an error."""

    case: Case
    attempts: list[EvalResult]

    @property
    def passed(self) -> int:
        return sum(1 for result in self.attempts if result.passed)

    @property
    def verdict(self) -> str:
        if self.attempts and self.passed == len(self.attempts):
            return ResultVerdict.PASSED
        if any(result.verdict == ResultVerdict.FAILED for result in self.attempts):
            return ResultVerdict.FAILED
        return ResultVerdict.ERROR

    @property
    def pass_rate(self) -> float | None:
        return self.passed / len(self.attempts) if self.attempts else None

    @property
    def latency(self) -> float | None:
        """The mean latency of the attempts that have one, in seconds."""
        found = [r.latency for r in self.attempts if r.latency is not None]
        return fmean(found) if found else None

    @property
    def tokens(self) -> float | None:
        """The mean prompt + completion tokens of an attempt."""
        return fmean(r.tokens for r in self.attempts) if self.attempts else None

    @property
    def got(self) -> dict[str, Any] | None:
        """The decision most attempts made; None when none decided anything."""
        decided: dict[str, dict[str, Any]] = {
            json.dumps(r.got, sort_keys=True): r.got for r in self.attempts if r.got
        }
        if not decided:
            return None
        made = Counter(json.dumps(r.got, sort_keys=True) for r in self.attempts if r.got)
        return decided[made.most_common(1)[0][0]]

    def got_text(self, limit: int) -> str:
        """The decision made, within `limit` characters; when attempts differ, each decision
        with how many made it."""
        made = Counter(r.got_text for r in self.attempts if r.got is not None)
        if len(made) <= 1:
            return clip(next(iter(made), "—"), limit)
        return ", ".join(f"{clip(text, limit - 10)} x{n}" for text, n in made.most_common())

    @property
    def reason(self) -> str:
        """Why it did not pass: each attempt's reason, once."""
        return "; ".join(dict.fromkeys(r.reason for r in self.failures if r.reason))

    @property
    def gated_text(self) -> str:
        """What approvals would have done to its calls, once per different answer of the
        attempts: "would have waited for approval: Handoff note"."""
        return "; ".join(dict.fromkeys(r.gated_text for r in self.attempts if r.gated_text))

    @property
    def failures(self) -> list[EvalResult]:
        return [result for result in self.attempts if not result.passed]


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
