"""What an evaluation comes to per case: its attempts, one verdict, the decision most made,
their mean latency and tokens. The terminal's report (`chat.management.outcomes`) and the
evaluation page's rows (`chat.evals.tables`) both read a case this way."""

from __future__ import annotations

import json
from collections import Counter
from statistics import fmean
from typing import Any

from chat.agent.probes.report import clip
from chat.models import EvalResult, ResultVerdict


class Attempts:
    """The rule for one case's attempts. It passes when every attempt passed; it failed when
    an attempt decided otherwise; otherwise (attempts that only errored, or none made) it is
    an error."""

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
