"""manage.py prune: drop model calls' raw streams older than AGENTLAB_KEEP_RAW_DAYS, and attached
files nobody sent."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Sum
from django.db.models.functions import Length
from django.utils import timezone

from chat.models import ModelCall
from chat.transcripts import attachments as stored_files


class Command(BaseCommand):
    help = (
        "Drop the raw streams (the provider's chunks with their arrival times) of model calls "
        "started more than N days ago: --days, else AGENTLAB_KEEP_RAW_DAYS. Requests, replies "
        "and every transcript are kept; the inspector and the admin then say when the stream "
        "was pruned. Also removes attached files that no message or case carries, uploaded "
        "more than a day ago (an upload waits a day for its message). --dry-run says what "
        "would be dropped."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days", metavar="N", help="Keep the last N days (default: AGENTLAB_KEEP_RAW_DAYS)."
        )
        parser.add_argument("--dry-run", action="store_true", help="Drop nothing; say what.")
        parser.add_argument("--json", action="store_true", help="One JSON object on stdout.")

    def handle(self, *args: Any, **options: Any) -> None:
        days = _days(options["days"])
        now = timezone.now()
        unsent = stored_files.unsent(now - timedelta(seconds=stored_files.TOKEN_MAX_AGE))
        if not options["dry_run"]:
            stored_files.remove(name for name, _ in unsent)
        files = {"files": len(unsent), "file_bytes": sum(size for _, size in unsent)}
        lines = [_files_summary(files, dry_run=options["dry_run"])] if unsent else []
        if days is None:
            if options["json"]:
                self.stdout.write(json.dumps({"days": None, "calls": 0, **files}))
                return
            lines.insert(
                0,
                "Nothing pruned: AGENTLAB_KEEP_RAW_DAYS is not set (raw streams are kept "
                "forever); pass --days N to prune once.",
            )
            self.stdout.write("\n".join(lines))
            return
        before = now - timedelta(days=days)
        calls = ModelCall.objects.prunable(before)
        found = calls.aggregate(bytes=Sum(Length("raw_stream_zlib")))
        if options["dry_run"]:
            count = calls.count()
        else:
            count = calls.update(raw_stream_zlib=b"", raw_pruned_at=now)
        if options["json"]:
            figures = {"days": days, "before": before.isoformat(), "calls": count}
            figures |= {"bytes": found["bytes"] or 0, "dry_run": options["dry_run"], **files}
            self.stdout.write(json.dumps(figures))
            return
        summary = _summary(count, found["bytes"] or 0, days, dry_run=options["dry_run"])
        self.stdout.write("\n".join([summary, *lines]))


def _days(given: str | None) -> int | None:
    """--days as a whole number of days, else the setting; CommandError on anything else."""
    if given is None:
        days: int | None = settings.AGENTLAB_KEEP_RAW_DAYS
        return days
    text = given.strip()
    if not (text.isascii() and text.isdigit()):
        raise CommandError(f"--days must be a whole number of days (0 or more), not {given!r}.")
    return int(text)


def _summary(count: int, size: int, days: int, *, dry_run: bool) -> str:
    age = f"more than {days} day{'s' if days != 1 else ''} old"
    if not count:
        return f"Nothing to prune: no model call's raw stream is {age}."
    calls = f"{count:,} model call{'s' if count != 1 else ''}"
    verb = "Would drop" if dry_run else "Dropped"
    return (
        f"{verb} the raw streams of {calls} {age} ({size / 1024:,.1f} KB compressed); their "
        "requests and transcripts are kept."
    )


def _files_summary(files: dict[str, int], *, dry_run: bool) -> str:
    count = files["files"]
    verb = "Would remove" if dry_run else "Removed"
    return (
        f"{verb} {count:,} attached file{'s' if count != 1 else ''} nobody sent "
        f"({files['file_bytes'] / 1024:,.1f} KB), uploaded more than a day ago."
    )
