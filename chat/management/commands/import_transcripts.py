"""manage.py import_transcripts: JSON Lines from export_transcripts back into conversations."""

from __future__ import annotations

import sys
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from chat.management.terminal import user_named
from chat.transcripts.imports import import_record
from chat.transcripts.records import ImportRefused, parse_line


class Command(BaseCommand):
    help = (
        "Store each line of FILE (JSON Lines, '-' for stdin) as a new conversation. Lines in the "
        "full format recreate the conversation with its runs, tool-call logs and model calls, "
        "timestamps and statuses, owned by the original owner (who must exist) or --user. Lines "
        "in the openai format ({messages, tools}) become new conversations of --user; leading "
        "system messages become its system prompts. Each line is written whole or not at all: "
        "an invalid line is reported on stderr with its number and skipped. Exit status 1 when "
        "a line failed."
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
        imported, failed = 0, 0
        try:
            for number, raw in enumerate(stream, start=1):
                if not raw.strip():
                    continue
                try:
                    record = parse_line(raw.decode("utf-8"))
                    conversation, warnings = import_record(record, user=user)
                except UnicodeDecodeError as exc:
                    failed += 1
                    self.stderr.write(f"line {number}: not UTF-8 text: {exc.reason}")
                    continue
                except (ImportRefused, DatabaseError) as exc:
                    failed += 1
                    self.stderr.write(f"line {number}: {exc}")
                    continue
                imported += 1
                for warning in warnings:
                    self.stderr.write(f"line {number}: warning: {warning}", self.style.WARNING)
                if options["verbosity"] >= 2:
                    self.stdout.write(
                        f"line {number}: conversation {conversation.pk} ({conversation})"
                    )
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
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
