"""manage.py eval: replay cases on a model and judge its tool decisions, from the terminal."""

from __future__ import annotations

import asyncio
import json
import logging
import textwrap
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat import agents
from chat.agent import decisions
from chat.agent.probes.report import clip
from chat.agents import suites
from chat.evals import replay
from chat.management.outcomes import Outcome, report, summary_line, verdict_text
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


class Command(BaseCommand):
    help = (
        "Replay evaluation cases (`manage.py cases`) on a model and compare the tool calls it "
        "decides on with each case's expectation. Every attempt is an ordinary run in a "
        "hidden conversation, every request a model call the inspector shows; no tool is "
        "executed, nor waits for approval (a call that would have is named under its row). "
        "Prints the rule, a table (one row per case) and a summary; exit status 1 "
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
            "--agent",
            metavar="NAME[@N]",
            help="Replay with this agent version's system prompts, pre-messages, tools and "
            "parameters, on its endpoint and model, instead of each case's own (NAME: its "
            "published version); --set defaults to the agent's suite.",
        )
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
        output = open_file(options["output"]) if options["output"] else None
        try:
            if options["agent"]:
                eval_run, chosen_cases, chosen = _agent_plan(user, case_set, options)
            else:
                eval_run, chosen_cases, chosen = _plan(user, case_set, options)
        except CommandError:
            if output is not None:
                output.close()
            raise
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
            if outcome.gated_text:
                self.stdout.write(f"    {outcome.gated_text}", style_func=plain)
            for result in outcome.failures:
                attempt = f"attempt {result.attempt}: " if len(outcome.attempts) > 1 else ""
                reason = result.reason or f"the attempt ended {result.verdict}"
                self.stdout.write(f"    ✗ {attempt}{reason}", style_func=plain)


def _outcomes(eval_run: EvalRun, chosen_cases: list[Case]) -> list[Outcome]:
    by_case: dict[int | None, list[EvalResult]] = {}
    for result in replay.results(eval_run):
        by_case.setdefault(result.case_id, []).append(result)
    return [Outcome(case, by_case.get(case.pk, [])) for case in chosen_cases]


def _plan(
    user: Any, case_set: CaseSet | None, options: dict[str, Any]
) -> tuple[EvalRun, list[Case], replay.Target]:
    """An evaluation of the cases on the endpoint the options name."""
    chosen_cases = _cases(case_set)
    try:
        chosen = replay.target(
            profile=_profile(options["profile"], user),
            model=options["model"],
            base_url=options["base_url"],
            api_key=options["api_key"],
        )
        eval_run = replay.create_eval_run(
            chosen_cases,
            chosen,
            user=user,
            case_set=case_set,
            repeat=options["repeat"],
            continue_loop=options["continue_loop"],
        )
    except RunRefused as exc:
        raise CommandError(str(exc)) from None
    return eval_run, chosen_cases, chosen


def _agent_plan(
    user: Any, case_set: CaseSet | None, options: dict[str, Any]
) -> tuple[EvalRun, list[Case], replay.Target]:
    """An evaluation of an agent version on a case set (its suite by default)."""
    flags = ("profile", "base-url", "model", "api-key")
    given = [f"--{flag}" for flag in flags if options[flag.replace("-", "_")]]
    if given:
        raise CommandError(
            f"--agent replays on the version's own endpoint and model: leave out "
            f"{', '.join(given)}."
        )
    try:
        version = agents.find_version(user, options["agent"])
        if version is None:
            raise agents.AgentRefused(
                "The built-in Default has no suite and no prompts of its own: name an agent."
            )
        planned = suites.plan_evaluation(
            version,
            user=user,
            case_set=case_set,
            repeat=options["repeat"],
            continue_loop=options["continue_loop"],
        )
    except agents.AgentRefused as exc:
        raise CommandError(str(exc)) from None
    return planned.eval_run, planned.cases, planned.target


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
