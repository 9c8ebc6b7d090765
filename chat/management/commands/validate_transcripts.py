"""manage.py validate_transcripts: the strict-history rules over every stored conversation."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Prefetch

from chat import transcripts
from chat.agent import history
from chat.models import Conversation, Message

REASON = "validate_transcripts --fix"


class Command(BaseCommand):
    help = (
        "Check every stored conversation against the strict-history rules and print each "
        "violation as 'conversation ID message INDEX: RULE: DETAIL'. With --fix, repair them "
        "with the history passes (answer dangling tool calls, drop orphan tool messages), "
        "recording each repair. A conversation with a run in progress may end on calls its run "
        "is still answering: that is not a violation, and it is never fixed here. Exit status 1 "
        "when violations remain."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--fix", action="store_true", help="Repair what can be repaired.")
        parser.add_argument("--conversation", type=int, metavar="ID", help="Only this one.")

    def handle(self, *args: Any, **options: Any) -> None:
        conversations = (
            Conversation.objects.with_active_run()
            .prefetch_related(Prefetch("messages", queryset=Message.objects.order_by("index")))
            .order_by("pk")
        )
        if options["conversation"] is not None:
            conversations = conversations.filter(pk=options["conversation"])
            if not conversations.exists():
                raise CommandError(f"No conversation {options['conversation']}.")
        checked = broken = found = fixed = left = 0
        for conversation in conversations.iterator(chunk_size=200):
            checked += 1
            violations = self._report(conversation)
            if not violations:
                continue
            broken += 1
            found += len(violations)
            if not options["fix"]:
                left += len(violations)
            elif getattr(conversation, "has_active_run", False):
                left += len(violations)
                self.stdout.write(
                    f"conversation {conversation.pk}: not fixed: a run is in progress "
                    "(runs of a process that died are recovered by recover_runs)"
                )
            else:
                remaining = self._fix(conversation)
                fixed += len(violations) - len(remaining)
                left += len(remaining)
        summary = f"Checked {checked} conversation(s): {found} violation(s)"
        if found:
            summary += f" in {broken} conversation(s)"
        if options["fix"]:
            summary += f"; fixed {fixed}"
        if left:
            summary += f"; {left} left"
        self.stdout.write(summary + ".")
        if left:
            hint = "" if options["fix"] else " (run with --fix to repair them)"
            raise CommandError(f"{left} violation(s) left{hint}.")

    def _report(self, conversation: Conversation) -> list[history.HistoryViolation]:
        rows = list(conversation.messages.all())
        violations = history.validate(
            transcripts.to_chat_messages(rows),
            allow_trailing_pending=getattr(conversation, "has_active_run", False),
        )
        for violation in violations:
            note = " (cannot be fixed)" if violation.rule in history.UNFIXABLE_RULES else ""
            self.stdout.write(
                f"conversation {conversation.pk} message {rows[violation.index].index}: "
                f"{violation.rule}: {violation.detail}{note}"
            )
        return violations

    def _fix(self, conversation: Conversation) -> list[history.HistoryViolation]:
        added, removed = transcripts.repair_conversation(conversation, reason=REASON)
        remaining = transcripts.validate_conversation(conversation)
        if added or removed:
            text = f"fixed: added {added} tool reply(ies), removed {removed} message(s)"
        else:
            text = "not changed"
        if remaining:
            text += f"; {len(remaining)} violation(s) cannot be fixed"
        self.stdout.write(f"conversation {conversation.pk}: {text}")
        return remaining
