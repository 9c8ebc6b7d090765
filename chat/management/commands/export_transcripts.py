"""manage.py export_transcripts: conversations as JSON Lines, for replay, fine-tuning or backup."""

from __future__ import annotations

import json
from contextlib import closing
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.management.terminal import (
    Progress,
    add_progress_option,
    lines_to,
    parse_since,
    plain,
    progress_wanted,
    user_named,
)
from chat.models import Conversation, Purpose
from chat.transcripts import export, markdown
from chat.transcripts.records import ExportRefused, NothingToExport


class Command(BaseCommand):
    help = (
        "Write conversations as JSON Lines, one object per conversation, on stdout or to --output. "
        "--format openai (default): {messages, tools}, exactly what a strict OpenAI-compatible "
        "endpoint accepts, a user message's files as the content parts a run sends; "
        "conversations whose history breaks the strict rules are reported on stderr and left "
        "out (fix them with validate_transcripts --fix). With --all-versions, one such line per "
        "version path: the active one, then each archived version. --format full: every field "
        "of the conversation, versions, runs, tool-call logs and model calls, and each attached "
        "file's bytes in base64, for import_transcripts. --format markdown: each conversation's "
        "active path as a document for people, tool calls and results as fenced blocks. Every "
        "JSON line says its conversation's purpose: chat, or eval for an evaluation's replay "
        "(drop it before sending an openai line). Replays are left out unless "
        "--include-replays. Progress and the summary go to stderr. Exit status 1 when a "
        "conversation or a version was left out."
    )
    # It reads and writes rows only: the system checks (every URLconf and view loaded) are
    # `manage.py check`'s and the server's, not a cost of each call.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--format", choices=["openai", "full", "markdown"], default="openai")
        parser.add_argument(
            "--all-versions",
            action="store_true",
            help="openai format: a line for every version path, not only the active one.",
        )
        parser.add_argument("--user", metavar="NAME", help="Only this user's conversations.")
        parser.add_argument(
            "--since",
            metavar="DATE",
            help="Only conversations active since DATE (YYYY-MM-DD or an ISO datetime).",
        )
        parser.add_argument("--conversation", type=int, metavar="ID", help="Only this one.")
        parser.add_argument(
            "--include-replays",
            action="store_true",
            help="Export evaluation replays too (purpose eval): they are left out by default.",
        )
        parser.add_argument("--output", metavar="FILE", help="Write here instead of stdout.")
        add_progress_option(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        user = user_named(options["user"]) if options["user"] else None
        since = parse_since(options["since"]) if options["since"] else None
        wanted = options["conversation"]
        replays = options["include_replays"]
        if wanted is not None:
            purpose = Conversation.objects.filter(pk=wanted).values_list("purpose", flat=True)
            if not purpose:
                raise CommandError(f"No conversation {wanted}.")
            if purpose[0] == Purpose.EVAL and not replays:
                raise CommandError(
                    f"Conversation {wanted} is an evaluation replay: add --include-replays to "
                    "export it."
                )
        conversations = export.select(
            user=user, since=since, conversation=wanted, include_replays=replays
        )
        left_out = 0
        if not replays:
            matching = export.select(user=user, since=since, include_replays=True)
            left_out = matching.filter(purpose=Purpose.EVAL).count()
        full = options["format"] == "full"
        all_versions = options["all_versions"]
        as_markdown = options["format"] == "markdown"
        if (full or as_markdown) and all_versions:
            raise CommandError("--all-versions is for the openai format: full has every version.")
        things = "version path(s)" if all_versions else "conversation(s)"
        show = progress_wanted(options, self.stderr)
        progress = Progress(self.stderr, total=conversations.count(), enabled=show)
        written, skipped, empty = 0, 0, 0
        with lines_to(options["output"], self.stdout) as write, closing(progress):
            fetched = conversations.for_export(full=full, all_versions=all_versions)
            found = (
                markdown.records(export.in_chunks(fetched))
                if as_markdown
                else export.records(export.in_chunks(fetched), full=full, all_versions=all_versions)
            )
            for conversation, version, record in found:
                if version is None:  # a conversation's first record: its active path
                    progress.advance()
                if isinstance(record, NothingToExport):
                    empty += 1
                    continue
                if isinstance(record, ExportRefused):
                    skipped += 1
                    progress.interrupt()
                    name = f"conversation {conversation.pk}" + (f" {version}" if version else "")
                    self.stderr.write(f"{name}: left out: {record}")
                    continue
                line = (
                    record
                    if not isinstance(record, dict)
                    else json.dumps(record, ensure_ascii=False)
                )
                write(line)
                written += 1
        where = f" to {options['output']}" if options["output"] else ""
        notes = [f"{empty} without messages"] if empty else []
        if skipped:
            notes.append(f"{skipped} left out")
        if left_out:
            notes.append(
                f"{left_out} evaluation replay(s) left out (--include-replays exports them)"
            )
        summary = f"Exported {written} {things}{where} ({options['format']} format)"
        self.stderr.write(summary + (f"; {', '.join(notes)}." if notes else "."), style_func=plain)
        if skipped:
            raise CommandError(f"{skipped} {things} left out: see the messages above.")
