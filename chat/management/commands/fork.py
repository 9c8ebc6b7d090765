"""manage.py fork: copy a conversation after a message; with an edited tool result, continue."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat import access
from chat.management.terminal import RunPrinter, finish, run_summary, run_to_end, user_named
from chat.models import Conversation, Message
from chat.transcripts import forks


class Command(BaseCommand):
    """Streams the continuation the way `manage.py chat` streams a reply."""

    help = (
        "Fork a conversation after message N. With --tool-result or --tool-failed, the fork gets "
        "that tool reply edited and the agent continues from it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("conversation", type=int, help="The conversation to fork (id).")
        parser.add_argument(
            "--at-message",
            type=int,
            required=True,
            metavar="N",
            help="Index of the last message copied (a tool round is copied whole).",
        )
        parser.add_argument("--tool-result", metavar="TEXT", help="The edited tool result.")
        parser.add_argument(
            "--tool-failed", action="store_true", help="Mark the tool call failed instead."
        )
        parser.add_argument(
            "--tool-call",
            metavar="ID",
            help="The call id to edit (default: the tool reply at or just before message N).",
        )
        parser.add_argument(
            "--user", help="Owner of the fork: its owner, or a teammate when it is shared."
        )
        parser.add_argument(
            "--no-continue", action="store_true", help="Fork only; do not start the agent."
        )
        parser.add_argument(
            "--json", action="store_true", help="Print one JSON object instead of streaming."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            parent = Conversation.objects.select_related("owner").get(pk=options["conversation"])
        except Conversation.DoesNotExist:
            raise CommandError(f"No conversation {options['conversation']}.") from None
        owner = self._owner(parent, options["user"])
        editing = options["tool_result"] is not None or options["tool_failed"]
        call_id = options["tool_call"]
        at = options["at_message"]
        if call_id and not editing:
            raise CommandError("--tool-call needs --tool-result or --tool-failed.")
        if editing and not call_id:
            call_id, at = implied_call(list(parent.messages.active()), at)
        try:
            fork = forks.fork_conversation(
                parent,
                owner=owner,
                at_message=at,
                tool_result=options["tool_result"],
                tool_failed=options["tool_failed"],
                tool_call_id=call_id,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        copied = fork.messages.count()
        if not options["json"]:
            edited = f"; the reply to {call_id} edited" if editing else ""
            self.stdout.write(
                f"Forked conversation {parent.pk} into {fork.pk} "
                f"(messages 0-{fork.forked_at}{edited})."
            )
        run = None
        if editing and not options["no_continue"]:
            run = run_to_end(
                conversation=fork,
                user=owner,
                content=None,
                printer=None if options["json"] else RunPrinter(self.stdout, self.stderr),
            )
        if options["json"]:
            summary = {
                "conversation": fork.pk,
                "parent": parent.pk,
                "forked_at": fork.forked_at,
                "messages": copied,
                "edited_tool_call": call_id if editing else None,
                "run": run_summary(run) if run is not None else None,
            }
            self.stdout.write(json.dumps(summary, ensure_ascii=False, indent=2))
        if run is not None:
            finish(run, label=run.model_label, stdout=self.stdout, as_json=options["json"])

    def _owner(self, parent: Conversation, username: str | None) -> Any:
        if not username:
            return parent.owner
        user = user_named(username)
        if refused := access.denied(user, access.Action.COPY, parent):
            raise CommandError(f"Conversation {parent.pk}, as {username!r}: {refused}")
        return user


def implied_call(rows: list[Message], at: int) -> tuple[str, int]:
    """The call id meant by "the tool call at or just before message N", and where it is."""
    try:
        row = forks.message_at(rows, at)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if row.role == Message.Role.TOOL:
        return row.tool_call_id, at
    rounds = [found for found in forks.tool_rounds(rows) if found.start <= at]
    if not rounds:
        raise CommandError(f"There is no tool call at or before message {at}.")
    found = rounds[-1]
    if len(found.call_ids) > 1:
        raise CommandError(
            f"Message {at} names no single tool call: the round at message {found.start} has "
            f"{len(found.call_ids)} ({', '.join(found.call_ids)}); choose one with --tool-call."
        )
    return found.call_ids[0], found.start
