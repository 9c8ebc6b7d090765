"""manage.py runs: the runs that wait for a person to decide their tool calls, listed and
decided from a script."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.management import approvals
from chat.management.terminal import RunPrinter, finish, user_named
from chat.models import Run, RunStatus
from chat.runs.approvals import DecisionRefused, decide


class Command(BaseCommand):
    help = (
        "Runs that wait for approval: `waiting` lists them with their waiting tool calls; "
        "`decide RUN` approves or denies them (all of them, or --call one) as the conversation's "
        "owner, the only one who may. A decided run goes on in a running server, or here with "
        "--wait."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        waiting = actions.add_parser(
            "waiting", help="List the runs that wait for a decision, oldest first."
        )
        waiting.add_argument("--json", action="store_true", help="Print them as JSON.")
        decision = actions.add_parser(
            "decide", help="Approve or deny the tool calls a run waits on."
        )
        decision.add_argument("run", type=int, metavar="RUN", help="The run (its id).")
        verdict = decision.add_mutually_exclusive_group(required=True)
        verdict.add_argument("--approve", action="store_true", help="Let the calls run.")
        verdict.add_argument("--deny", action="store_true", help="Do not let them run.")
        decision.add_argument(
            "--reason", default="", metavar="TEXT", help="With --deny: why (the model reads it)."
        )
        decision.add_argument(
            "--call",
            metavar="CALL",
            help="Decide only this call (its id as `runs waiting` shows it, or the model's "
            "call id); default: every waiting call of the run.",
        )
        decision.add_argument(
            "--user",
            metavar="NAME",
            help="Who decides (default: the conversation's owner; only the owner may).",
        )
        decision.add_argument(
            "--wait",
            action="store_true",
            help="Resume the run here and wait for its end, instead of leaving it to a server.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "waiting":
            listed = approvals.waiting_runs()
            if options["json"]:
                self.stdout.write(json.dumps(listed, ensure_ascii=False, indent=2))
            else:
                for line in approvals.waiting_lines(listed):
                    self.stdout.write(line)
            return
        self._decide(options)

    def _decide(self, options: dict[str, Any]) -> None:
        if options["reason"] and not options["deny"]:
            raise CommandError("--reason goes with --deny: it tells the model why.")
        run = Run.objects.select_related("conversation__owner").filter(pk=options["run"]).first()
        if run is None:
            raise CommandError(f"No run {options['run']}.")
        user = user_named(options["user"]) if options["user"] else run.conversation.owner
        call = approvals.call_named(run, options["call"]) if options["call"] else None
        verdict = "approve" if options["approve"] else "deny"
        try:
            decided = decide(user, run.pk, verdict, call=call, reason=options["reason"])
        except DecisionRefused as exc:
            raise CommandError(f"Run {run.pk}, as {user.get_username()!r}: {exc}") from None
        line = approvals.decided_line(decided, verdict, user)
        if not decided.resumable:
            self.stdout.write(line)
            return
        if not options["wait"]:
            self.stdout.write(f"{line} It is in progress again: {approvals.claim_note()}.")
            return
        self.stdout.write(f"{line} Resuming it here:")
        resumed = approvals.resume_here(decided.run, printer=RunPrinter(self.stdout, self.stderr))
        if resumed is None:
            self.stdout.write(f"run {run.pk}: a server process resumed it first.")
            return
        if resumed.status == RunStatus.REQUIRES_ACTION:
            self.stdout.write(
                f"run {run.pk} waits for a decision again: manage.py runs waiting shows its calls."
            )
            return
        finish(resumed, label=resumed.model_label, stdout=self.stdout, as_json=False)
