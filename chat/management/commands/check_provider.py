"""manage.py check_provider: what an OpenAI-compatible endpoint does, before a run depends on it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat import probes


class Command(BaseCommand):
    help = (
        "Connect to an OpenAI-compatible endpoint, list its models, run a streaming probe and a "
        "tool-calling probe, and report what it does: whether it sends a usage chunk, which "
        "finish_reason it gives with tool calls, which field carries reasoning, and whether it "
        'accepts "" or null content on a tool-call-only assistant message. Exit status 0 only '
        "when chat and tool calling work. The API key is never printed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--base-url", help="Default: OPENAI_BASE_URL.")
        parser.add_argument("--api-key", help="Default: OPENAI_API_KEY.")
        parser.add_argument(
            "--model", help="Default: AGENTLAB_MODEL, else the first model the endpoint lists."
        )
        parser.add_argument(
            "--timeout", type=float, default=60.0, help="Seconds to wait for each answer."
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        base_url = options["base_url"] or settings.OPENAI_BASE_URL
        if not base_url:
            raise CommandError(
                "No provider to check: pass --base-url or set OPENAI_BASE_URL (without one, the "
                "lab uses its built-in scripted model, which needs no check)."
            )
        report = asyncio.run(
            probes.check_provider(
                base_url=base_url,
                api_key=options["api_key"] or settings.OPENAI_API_KEY or None,
                model=options["model"] or settings.AGENTLAB_MODEL or None,
                read_timeout=options["timeout"],
                configured_content=settings.AGENTLAB_TOOL_CALL_CONTENT,
            )
        )
        if options["json"]:
            self.stdout.write(json.dumps(report.to_json(), ensure_ascii=False, indent=2))
        else:
            self.stdout.write("\n".join(probes.describe(report)))
        if report.unreachable:
            raise CommandError(f"Cannot reach the provider: {report.unreachable}")
        if report.problem:
            raise CommandError(report.problem[:1].upper() + report.problem[1:] + ".")
        if not report.works:
            failing = [
                name
                for name, works in (
                    ("chat", report.chat_works),
                    ("tool calling", report.tool_calling_works),
                )
                if not works
            ]
            raise CommandError(f"The provider failed the probe: {' and '.join(failing)}.")
