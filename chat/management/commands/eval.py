"""manage.py eval: replay cases on a model and judge its tool decisions, from the terminal."""

from __future__ import annotations

import asyncio
import json
import logging
import textwrap
import time
from collections import Counter
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.agent import decisions
from chat.agent.probes.report import clip
from chat.evals import replay
from chat.management.terminal import (
    Progress,
    RetryProgress,
    add_progress_option,
    open_file,
    plain,
    plural,
    progress_wanted,
    table,
    unsent_key_note,
    user_named,
)
from chat.models import (
    Case,
    CaseSet,
    EvalResult,
    EvalRun,
    EvalStatus,
    ProviderProfile,
    ResultVerdict,
)
from chat.runs import RunRefused


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
    def failures(self) -> list[EvalResult]:
        return [result for result in self.attempts if not result.passed]


class Command(BaseCommand):
    help = (
        "Replay evaluation cases (`manage.py cases`) on a model and compare the tool calls it "
        "decides on with each case's expectation. Every attempt is an ordinary run in a "
        "hidden conversation, every request a model call the inspector shows; no tool is "
        "executed. Prints the rule, a table (one row per case) and a summary; exit status 1 "
        "when a case did not pass. A case passes when all its attempts pass."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--set", metavar="NAME", help="Replay this set (default: every case).")
        parser.add_argument("--base-url", help="OpenAI-compatible base URL (default: settings).")
        parser.add_argument(
            "--api-key",
            help="API key (default: OPENAI_API_KEY, which is sent only to OPENAI_BASE_URL: to "
            "another --base-url, no key unless this is given). Never printed nor stored.",
        )
        parser.add_argument("--model", help="Model name (default: the endpoint's).")
        parser.add_argument(
            "--profile", metavar="NAME", help="Replay on this provider profile's endpoint."
        )
        parser.add_argument(
            "--repeat",
            type=int,
            default=1,
            metavar="N",
            help="Attempts per case (default 1): the row shows how many passed.",
        )
        parser.add_argument(
            "--continue",
            dest="continue_loop",
            action="store_true",
            help="Go on to the final answer, each tool call answered from the case's recorded "
            "results (the verdict is still the first decision's).",
        )
        parser.add_argument(
            "--json", action="store_true", help="Print one JSON document instead of the table."
        )
        parser.add_argument("--output", metavar="FILE", help="Also write the JSON document here.")
        parser.add_argument(
            "--user",
            metavar="NAME",
            help="Owner of the replays' conversations (default: 'cli', created if missing).",
        )
        add_progress_option(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["profile"] and options["base_url"]:
            raise CommandError(
                "--profile and --base-url each name an endpoint: choose one (--model may go "
                "with either)."
            )
        user = user_named(options["user"] or "cli", create=not options["user"])
        case_set = _case_set(options["set"])
        chosen_cases = _cases(case_set)
        try:
            chosen = replay.target(
                profile=_profile(options["profile"], user),
                model=options["model"],
                base_url=options["base_url"],
                api_key=options["api_key"],
            )
        except RunRefused as exc:
            raise CommandError(str(exc)) from None
        output = open_file(options["output"]) if options["output"] else None
        try:
            eval_run = replay.create_eval_run(
                chosen_cases,
                chosen,
                user=user,
                case_set=case_set,
                repeat=options["repeat"],
                continue_loop=options["continue_loop"],
            )
        except RunRefused as exc:
            if output is not None:
                output.close()
            raise CommandError(str(exc)) from None
        if note := unsent_key_note(options["base_url"], given=bool(options["api_key"])):
            self.stderr.write(note)
        try:
            if not options["json"]:
                self.stdout.write(textwrap.fill(f"Rule: {decisions.RULE}", width=100))
                self.stdout.write("")
            started = time.monotonic()
            self._replay(eval_run, chosen_cases, chosen, user=user, options=options)
            elapsed = time.monotonic() - started
            outcomes = _outcomes(eval_run, chosen_cases)
            document = report(eval_run, outcomes, seconds=elapsed)
            if output is not None:
                output.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
        finally:
            if output is not None:
                output.close()
        if options["json"]:
            self.stdout.write(json.dumps(document, ensure_ascii=False, indent=2))
        else:
            self._print(outcomes)
            self.stdout.write(summary_line(eval_run, outcomes, seconds=elapsed))
        if eval_run.status != EvalStatus.COMPLETED:
            raise CommandError(f"Eval run {eval_run.pk} ended {eval_run.status}: {eval_run.error}")
        not_passed = sum(1 for outcome in outcomes if outcome.verdict != ResultVerdict.PASSED)
        if not_passed:
            raise CommandError(
                f"{not_passed} of {plural(len(outcomes), 'case')} did not pass on "
                f"{eval_run.label} (eval run {eval_run.pk})."
            )

    def _replay(
        self,
        eval_run: EvalRun,
        chosen_cases: list[Case],
        chosen: replay.Target,
        *,
        user: Any,
        options: dict[str, Any],
    ) -> None:
        """Run the evaluation to its end with a progress bar on stderr; Ctrl-C stops it (what
        was done is kept)."""
        show = progress_wanted(options, self.stderr)
        progress = Progress(
            self.stderr, total=eval_run.total, enabled=show, verb="Evaluating", things="attempts"
        )

        async def advance(_: EvalRun, __: EvalResult) -> None:
            progress.advance()

        clients = logging.getLogger("chat.agent.clients")
        retries = RetryProgress(self.stderr, progress)
        clients.addFilter(retries)
        try:
            asyncio.run(
                replay.run_eval(eval_run, chosen_cases, chosen, user=user, listeners=[advance])
            )
        except KeyboardInterrupt:
            raise CommandError(
                f"Stopped: eval run {eval_run.pk} is cancelled; its finished attempts are kept."
            ) from None
        finally:
            clients.removeFilter(retries)
            progress.close()
        eval_run.refresh_from_db()

    def _print(self, outcomes: list[Outcome]) -> None:
        rows = [("CASE", "EXPECTED", "GOT", "VERDICT", "LATENCY", "TOKENS")]
        for outcome in outcomes:
            rows.append(
                (
                    f"#{outcome.case.pk} {clip(outcome.case.title, 40)}",
                    clip(outcome.case.expected_text, 50),
                    outcome.got_text(50),
                    verdict_text(outcome),
                    "—" if outcome.latency is None else f"{outcome.latency:.2f} s",
                    "—" if outcome.tokens is None else f"{outcome.tokens:.0f}",
                )
            )
        lines = table(rows)
        self.stdout.write(lines[0])
        for line, outcome in zip(lines[1:], outcomes, strict=True):
            self.stdout.write(line)
            for result in outcome.failures:
                attempt = f"attempt {result.attempt}: " if len(outcome.attempts) > 1 else ""
                reason = result.reason or f"the attempt ended {result.verdict}"
                self.stdout.write(f"    ✗ {attempt}{reason}", style_func=plain)


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
                "run": result.run_id,
            }
            for result in outcome.attempts
        ],
        "pass_rate": outcome.pass_rate,
        "latency": outcome.latency,
        "tokens": outcome.tokens,
        "reason": outcome.reason,
    }


def _outcomes(eval_run: EvalRun, chosen_cases: list[Case]) -> list[Outcome]:
    by_case: dict[int | None, list[EvalResult]] = {}
    for result in replay.results(eval_run):
        by_case.setdefault(result.case_id, []).append(result)
    return [Outcome(case, by_case.get(case.pk, [])) for case in chosen_cases]


def _case_set(name: str | None) -> CaseSet | None:
    if name is None:
        return None
    try:
        return CaseSet.objects.get(name=name)
    except CaseSet.DoesNotExist:
        raise CommandError(f"No case set named {name!r} (manage.py cases list).") from None


def _cases(case_set: CaseSet | None) -> list[Case]:
    rows = Case.objects.select_related("case_set").order_by("case_set__name", "pk")
    found = list(rows.filter(case_set=case_set) if case_set is not None else rows)
    if not found:
        where = f"in the set {case_set.name!r}" if case_set is not None else "yet"
        raise CommandError(
            f"No cases {where}: keep one with manage.py cases add --conversation ID --at-message N."
        )
    return found


def _profile(name: str | None, user: Any) -> ProviderProfile | None:
    """The profile named, if `user` may use it (as in the browser); CommandError otherwise."""
    if name is None:
        return None
    profile = ProviderProfile.objects.filter(name=name).first()
    if profile is None:
        known = ", ".join(ProviderProfile.objects.values_list("name", flat=True)) or "none"
        raise CommandError(f"No provider profile named {name!r} (profiles: {known}).")
    if not ProviderProfile.objects.usable_by(user).filter(pk=profile.pk).exists():
        raise CommandError(
            f"{user.get_username()!r} may not use the provider profile {name!r}: pass --user "
            "NAME of someone who may."
        )
    return profile
