"""manage.py validate_transcripts: the strict-history rules over every stored conversation."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat import transcripts
from chat.agent import history
from chat.models import Conversation, Message, Version
from chat.transcripts import versions

REASON = "validate_transcripts --fix"


class Command(BaseCommand):
    help = (
        "Check every path of every stored conversation (the active one and each archived "
        "version) against the strict-history rules and print each violation as 'conversation "
        "ID message INDEX: RULE: DETAIL', or 'conversation ID version N from message I, message "
        "INDEX: ...' on an archived version. With --fix, repair them with the history passes "
        "(answer dangling tool calls, drop orphan tool messages), recording each repair. A "
        "conversation with a run in progress may end on calls its run is still answering: that "
        "is not a violation, and it is never fixed here. Exit status 1 when violations remain."
    )
    # It reads and writes rows only: the system checks (every URLconf and view loaded) are
    # `manage.py check`'s and the server's, not a cost of each call.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--fix", action="store_true", help="Repair what can be repaired.")
        parser.add_argument("--conversation", type=int, metavar="ID", help="Only this one.")

    def handle(self, *args: Any, **options: Any) -> None:
        conversations = Conversation.objects.with_active_run().order_by("pk")
        if options["conversation"] is not None:
            conversations = conversations.filter(pk=options["conversation"])
            if not conversations.exists():
                raise CommandError(f"No conversation {options['conversation']}.")
        checked = broken = found = fixed = left = 0
        for conversation in conversations.iterator(chunk_size=200):
            checked += 1
            running = getattr(conversation, "has_active_run", False)
            here = 0
            for path in versions.paths(conversation):
                violations = self._report(conversation, path, running=running)
                here += len(violations)
                if not violations or not options["fix"] or running:
                    left += len(violations)
                    continue
                remaining = self._fix(conversation, path.version)
                fixed += len(violations) - len(remaining)
                left += len(remaining)
            if here:
                broken += 1
                found += here
            if here and options["fix"] and running:
                self.stdout.write(
                    f"conversation {conversation.pk}: not fixed: a run is in progress "
                    "(runs of a process that died are recovered by recover_runs)"
                )
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

    def _report(
        self, conversation: Conversation, path: versions.Path, *, running: bool
    ) -> list[history.HistoryViolation]:
        """Print the path's violations; only the active path may end on pending calls."""
        violations = history.validate(
            transcripts.to_chat_messages(path.messages),
            allow_trailing_pending=running and path.version is None,
        )
        where = _name(conversation, path.version)
        where += "," if path.version is not None else ""
        for violation in violations:
            note = " (cannot be fixed)" if violation.rule in history.UNFIXABLE_RULES else ""
            self.stdout.write(
                f"{where} message {path.messages[violation.index].index}: "
                f"{violation.rule}: {violation.detail}{note}"
            )
        return violations

    def _fix(
        self, conversation: Conversation, version: Version | None
    ) -> list[history.HistoryViolation]:
        added, removed = transcripts.repair_conversation(
            conversation, reason=REASON, version=version
        )
        remaining = history.validate(transcripts.to_chat_messages(_rows(conversation, version)))
        if added or removed:
            text = f"fixed: added {added} tool reply(ies), removed {removed} message(s)"
        else:
            text = "not changed"
        if remaining:
            text += f"; {len(remaining)} violation(s) cannot be fixed"
        self.stdout.write(f"{_name(conversation, version)}: {text}")
        return remaining


def _name(conversation: Conversation, version: Version | None) -> str:
    """How lines name a path: `conversation 3`, or `conversation 3 version 2 from message 4`."""
    return f"conversation {conversation.pk}" + (f" {version}" if version is not None else "")


def _rows(conversation: Conversation, version: Version | None) -> list[Message]:
    """A path's messages as stored now."""
    if version is None:
        return list(conversation.messages.active())
    return next(p.messages for p in versions.paths(conversation) if p.version == version)
