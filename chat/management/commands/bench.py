"""`manage.py bench`: the streaming benchmark (bench/README.md says what it measures)."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench import data_measure, data_report, runner


def _levels(value: str) -> list[int]:
    try:
        levels = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise CommandError(f"--levels takes numbers separated by commas, not {value!r}") from None
    if not levels or min(levels) < 1:
        raise CommandError("--levels needs at least one level, each 1 or more")
    return levels


class Command(BaseCommand):
    help = (
        "Benchmark streaming: a local provider, the app under daphne, WebSocket clients and a "
        "browser, against a client reading the provider directly. Prints a table and writes JSON."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--levels", default="1,10,50,200", help="concurrency levels")
        parser.add_argument("--tokens", type=int, default=500, help="tokens per reply")
        parser.add_argument("--pace-ms", type=float, default=0.0, help="ms between tokens")
        parser.add_argument("--tool-rounds", type=int, default=0, help="tool-call rounds first")
        parser.add_argument(
            "--browser",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="also time the page in chromium (default: on)",
        )
        parser.add_argument(
            "--scaleout",
            action="store_true",
            help="two daphne processes on PostgreSQL and Redis instead of one on SQLite",
        )
        parser.add_argument("--json", dest="json_path", help="JSON output (default var/bench/)")
        parser.add_argument("--quick", action="store_true", help="few samples: a smoke run")
        parser.add_argument(
            "--data",
            action="store_true",
            help="instead: pages, search, admin, storage, export and import on a big database",
        )
        parser.add_argument("--conversations", type=int, default=5000, help="--data: how many")
        parser.add_argument("--messages", type=int, help="--data: messages in all (search size)")
        parser.add_argument("--long-turns", type=int, default=300, help="--data: long one's turns")
        parser.add_argument(
            "--data-db",
            metavar="NAME",
            help="--data: keep the built database (a PostgreSQL name, or a SQLite file) and "
            "reuse it when it exists",
        )
        parser.add_argument(
            "--profile",
            metavar="DIR",
            help="record daphne with py-spy during each level's relayed rounds into DIR",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["data"]:
            self.data(options)
            return
        if options["tokens"] < 1 or options["pace_ms"] < 0 or options["tool_rounds"] < 0:
            raise CommandError("--tokens must be 1 or more; --pace-ms and --tool-rounds 0 or more")
        settings = runner.Options(
            levels=_levels(options["levels"]),
            tokens=options["tokens"],
            pace_ms=options["pace_ms"],
            tool_rounds=options["tool_rounds"],
            browser=options["browser"],
            scaleout=options["scaleout"],
            quick=options["quick"],
            profile=Path(options["profile"]) if options["profile"] else None,
            command="python manage.py " + shlex.join(sys.argv[1:]),
        )
        path = Path(options["json_path"]) if options["json_path"] else runner.default_json_path()

        def log(line: str) -> None:
            self.stderr.write(f"· {line}")

        def terminate(signum: int, frame: object) -> None:
            raise SystemExit(128 + signum)  # unwinds, so the provider and daphne are stopped

        signal.signal(signal.SIGTERM, terminate)
        report = runner.run(settings, log)
        runner.write_json(report, path)
        self.stdout.write(runner.render(report))
        self.stdout.write(f"\nJSON: {path}")

    def data(self, options: dict[str, Any]) -> None:
        if options["conversations"] < 1 or options["long_turns"] < 1:
            raise CommandError("--conversations and --long-turns must be 1 or more")
        settings = data_measure.Options(
            conversations=options["conversations"],
            messages=options["messages"],
            long_turns=options["long_turns"],
            scaleout=options["scaleout"],
            database=options["data_db"],
            samples=2 if options["quick"] else 5,
            import_lines=10 if options["quick"] else 100,
            command="python manage.py " + shlex.join(sys.argv[1:]),
        )
        path = Path(options["json_path"]) if options["json_path"] else runner.default_json_path()
        report = data_measure.run(settings, lambda line: self.stderr.write(f"· {line}"))
        report["targets"] = data_report.evaluate(report)
        runner.write_json(report, path)
        self.stdout.write(data_report.render(report))
        self.stdout.write(f"\nJSON: {path}")
