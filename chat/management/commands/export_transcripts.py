"""manage.py export_transcripts: conversations as JSON Lines, for replay, fine-tuning or backup."""

from __future__ import annotations

import argparse
import json
import time
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat import exports
from chat.models import Conversation


class Command(BaseCommand):
    help = (
        "Write conversations as JSON Lines, one object per conversation, on stdout or to --output. "
        "--format openai (default): {messages, tools}, exactly what a strict OpenAI-compatible "
        "endpoint accepts; conversations whose history breaks the strict rules are reported on "
        "stderr and left out (fix them with validate_transcripts --fix). --format full: every "
        "field of the conversation, runs, tool-call logs and model calls, for import_transcripts. "
        "Progress and the summary go to stderr. Exit status 1 when a conversation was left out."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--format", choices=["openai", "full"], default="openai")
        parser.add_argument("--user", metavar="NAME", help="Only this user's conversations.")
        parser.add_argument(
            "--since",
            metavar="DATE",
            help="Only conversations active since DATE (YYYY-MM-DD or an ISO datetime).",
        )
        parser.add_argument("--conversation", type=int, metavar="ID", help="Only this one.")
        parser.add_argument("--output", metavar="FILE", help="Write here instead of stdout.")
        parser.add_argument(
            "--progress",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="Show a progress bar on stderr (default: when stderr is a terminal).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            user = exports.user_named(options["user"]) if options["user"] else None
            since = exports.parse_since(options["since"]) if options["since"] else None
        except (LookupError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        wanted = options["conversation"]
        if wanted is not None and not Conversation.objects.filter(pk=wanted).exists():
            raise CommandError(f"No conversation {wanted}.")
        conversations = exports.select(user=user, since=since, conversation=wanted)
        full = options["format"] == "full"
        show = options["progress"] if options["progress"] is not None else self.stderr.isatty()
        progress = Progress(self.stderr, total=conversations.count(), enabled=show)
        output = self._open(options["output"])
        written, skipped, empty = 0, 0, 0
        try:
            rows = exports.for_export(conversations, full=full).iterator(chunk_size=100)
            for conversation, record in exports.records(rows, full=full):
                progress.advance()
                if isinstance(record, exports.NothingToExport):
                    empty += 1
                    continue
                if isinstance(record, exports.ExportRefused):
                    skipped += 1
                    progress.interrupt()
                    self.stderr.write(f"conversation {conversation.pk}: left out: {record}")
                    continue
                line = json.dumps(record, ensure_ascii=False)
                if output is None:
                    self.stdout.write(line)
                else:
                    output.write(line + "\n")
                written += 1
        finally:
            progress.close()
            if output is not None:
                output.close()
        where = f" to {options['output']}" if options["output"] else ""
        notes = [f"{empty} without messages"] if empty else []
        if skipped:
            notes.append(f"{skipped} left out")
        summary = f"Exported {written} conversation(s){where} ({options['format']} format)"
        self.stderr.write(summary + (f"; {', '.join(notes)}." if notes else "."), style_func=_plain)
        if skipped:
            raise CommandError(f"{skipped} conversation(s) left out: see the messages above.")

    def _open(self, path: str | None) -> IO[str] | None:
        if not path:
            return None
        try:
            return open(path, "w", encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"Cannot write {path}: {exc.strerror}.") from None


def _plain(text: str) -> str:
    return text


class Progress:
    """A one-line progress bar on stderr, redrawn at most ten times a second."""

    WIDTH = 30

    def __init__(self, stream: Any, *, total: int, enabled: bool) -> None:
        self.stream = stream
        self.total = total
        self.enabled = enabled and total > 0
        self.done = 0
        self.drawn_at = 0.0
        self.visible = False

    def advance(self) -> None:
        self.done += 1
        now = time.monotonic()
        if self.enabled and (now - self.drawn_at >= 0.1 or self.done == self.total):
            self.drawn_at = now
            self._draw()

    def interrupt(self) -> None:
        """End the bar's line so a message can be written; it is redrawn on the next step."""
        if self.visible:
            self.stream.write("", style_func=_plain)
            self.visible = False

    def close(self) -> None:
        if self.visible:
            self._draw()
            self.interrupt()

    def _draw(self) -> None:
        filled = self.WIDTH * self.done // self.total
        bar = "#" * filled + "." * (self.WIDTH - filled)
        text = f"\rExporting [{bar}] {self.done}/{self.total} conversations"
        self.stream.write(text, style_func=_plain, ending="")
        self.stream.flush()
        self.visible = True
