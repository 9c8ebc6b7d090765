"""manage.py fork: copy a conversation after a message; with an edited tool result, continue."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, CommandParser

from chat import forks, runs
from chat.management.commands import chat
from chat.models import Conversation, Message, Run


class Command(chat.Command):
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
        parser.add_argument("--user", help="Owner of the fork; must own the conversation.")
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
            call_id, at = implied_call(list(parent.messages.order_by("index")), at)
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
            run = asyncio.run(self._continue(fork, owner, quiet=options["json"]))
            run.refresh_from_db()
        if options["json"]:
            summary = {
                "conversation": fork.pk,
                "parent": parent.pk,
                "forked_at": fork.forked_at,
                "messages": copied,
                "edited_tool_call": call_id if editing else None,
                "run": chat._summary(run) if run is not None else None,
            }
            self.stdout.write(json.dumps(summary, ensure_ascii=False, indent=2))
        elif run is not None:
            self.stdout.write(
                f"[{run.model_label} · run {run.pk} {run.status} · conversation {fork.pk} · "
                f"{run.prompt_tokens} prompt + {run.completion_tokens} completion tokens · "
                f"{run.steps} step(s) · {run.duration or 0:.2f}s]"
            )
        if run is not None and run.status != "completed":
            raise CommandError(run.error or f"The run ended {run.status}.")

    def _owner(self, parent: Conversation, username: str | None) -> Any:
        if not username:
            return parent.owner
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: username})
        except User.DoesNotExist:
            raise CommandError(f"No user named {username!r}.") from None
        if user.pk != parent.owner_id:
            raise CommandError(f"Conversation {parent.pk} does not belong to {username!r}.")
        return user

    async def _continue(self, fork: Conversation, owner: Any, *, quiet: bool) -> Run:
        try:
            handle = await runs.start_run(
                conversation=fork,
                user=owner,
                content=None,
                listeners=[] if quiet else [self._print],
            )
        except runs.RunRefused as exc:
            raise CommandError(str(exc)) from None
        return await handle.task


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
