"""manage.py import_transcripts: JSON Lines from export_transcripts back into conversations."""

from __future__ import annotations

import sys
import traceback
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from chat.management.terminal import user_named
from chat.transcripts.forks import MAX_TOOL_RESULT_CHARS
from chat.transcripts.imports import import_record
from chat.transcripts.records import ImportRefused, NoOwner, parse_line

MAX_REASON_CHARS = 1000


class Command(BaseCommand):
    help = (
        "Store each line of FILE (JSON Lines, '-' for stdin) as a new conversation. Lines in the "
        "full format recreate the conversation with its runs, tool-call logs and model calls, "
        "timestamps and statuses, owned by the original owner (who must exist) or --user. Lines "
        "in the openai format ({messages, tools}) become new conversations of --user; leading "
        "system messages become its system prompts. Each line is checked against the record "
        "schema and written whole or not at all, its attached files through the upload's gate "
        "and limits (an https image is refused: nothing is fetched): an invalid line is reported "
        "on stderr as one line with its number and skipped (--traceback shows where an "
        f"unexpected error came from). A tool result over {MAX_TOOL_RESULT_CHARS:,} characters "
        "is folded, with a warning. Exit status 1 when a line failed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", metavar="FILE")
        parser.add_argument(
            "--user",
            metavar="NAME",
            help="Owner of the imported conversations (required for the openai format).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user = user_named(options["user"]) if options["user"] else None
        path = options["file"]
        stream = self._open(path)
        imported, failed, ownerless = 0, 0, 0
        try:
            for number, raw in enumerate(stream, start=1):
                if not raw.strip():
                    continue
                try:
                    record, notes = parse_line(raw.decode("utf-8"))
                    conversation, warnings = import_record(record, user=user)
                except NoOwner as exc:
                    # Said once: the same reason on every line would hide the broken lines.
                    failed += 1
                    ownerless += 1
                    if ownerless == 1:
                        self.stderr.write(f"line {number}: {exc}")
                    continue
                except Exception as exc:  # a hostile line costs its own line, never the import
                    failed += 1
                    self.stderr.write(f"line {number}: {refusal(exc)}")
                    if options["traceback"] and not isinstance(exc, ImportRefused):
                        self.stderr.write(traceback.format_exc())
                    continue
                imported += 1
                for warning in [*notes, *warnings]:
                    self.stderr.write(f"line {number}: warning: {warning}", self.style.WARNING)
                if options["verbosity"] >= 2:
                    self.stdout.write(
                        f"line {number}: conversation {conversation.pk} ({conversation})"
                    )
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
        if ownerless > 1:
            self.stderr.write(
                f"{ownerless - 1} more line(s) in the openai format were skipped for the same "
                "reason: pass --user"
            )
        summary = f"Imported {imported} conversation(s) from {path}"
        self.stdout.write(summary + (f"; {failed} line(s) failed." if failed else "."))
        if failed:
            raise CommandError(f"{failed} line(s) failed: see the messages above.")

    def _open(self, path: str) -> IO[bytes]:
        if path == "-":
            return sys.stdin.buffer
        try:
            return open(path, "rb")
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror}.") from None


def refusal(exc: Exception) -> str:
    """Why a line failed, as one line of at most MAX_REASON_CHARS (a hostile line chooses the
    text); an error that is no refusal is named, and --traceback shows where it came from."""
    if isinstance(exc, UnicodeDecodeError):
        text = f"not UTF-8 text: {exc.reason}"
    elif isinstance(exc, ImportRefused | DatabaseError):
        text = str(exc)
    else:
        text = f"cannot import ({type(exc).__name__}: {exc})"
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS] + "…"
