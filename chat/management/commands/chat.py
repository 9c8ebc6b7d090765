"""manage.py chat: one user turn through the same run path the web uses, from the terminal."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from pydantic import ValidationError

from chat import agent, runs
from chat.agent.contracts import validation_text
from chat.management.terminal import (
    RunPrinter,
    finish,
    run_summary,
    run_to_end,
    unsent_key_note,
    user_named,
)
from chat.models import Conversation


class Command(BaseCommand):
    help = "Send one message to the agent, stream the reply, and store the conversation."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("message", help="The user message.")
        parser.add_argument("--conversation", type=int, help="Continue this conversation (id).")
        parser.add_argument(
            "--user", help="Owner of a new conversation (default: 'cli', created if missing)."
        )
        parser.add_argument("--base-url", help="OpenAI-compatible base URL (default: settings).")
        parser.add_argument(
            "--api-key",
            help="API key (default: OPENAI_API_KEY, which is sent only to OPENAI_BASE_URL: to "
            "another --base-url, no key unless this is given).",
        )
        parser.add_argument("--model", help="Model name (default: AGENTLAB_MODEL).")
        parser.add_argument(
            "--tool", action="append", default=[], metavar="NAME", help="Enable a tool (repeat)."
        )
        parser.add_argument("--all-tools", action="store_true", help="Enable every tool.")
        parser.add_argument(
            "--system", action="append", default=[], metavar="TEXT", help="A system prompt."
        )
        parser.add_argument("--max-event-loops", type=int, help="Model turns per run (1-50).")
        parser.add_argument("--temperature", type=float, help="Sampling temperature (0-2).")
        parser.add_argument(
            "--json", action="store_true", help="Print one JSON object instead of streaming."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        conversation = self._conversation(options)
        target = runs.endpoint(
            conversation.profile,
            model=conversation.agent_parameters().model,
            base_url=options["base_url"],
        )
        try:
            client = runs.build_client(target, api_key=options["api_key"])
        except runs.RunRefused as exc:
            raise CommandError(str(exc)) from None
        if note := unsent_key_note(options["base_url"], given=bool(options["api_key"])):
            self.stderr.write(note)
        run = run_to_end(
            conversation=conversation,
            user=conversation.owner,
            content=options["message"],
            client=client,
            printer=None if options["json"] else RunPrinter(self.stdout, self.stderr),
        )
        if options["json"]:
            self.stdout.write(json.dumps(run_summary(run), ensure_ascii=False, indent=2))
        finish(run, label=client.label, stdout=self.stdout, as_json=options["json"])

    def _conversation(self, options: dict[str, Any]) -> Conversation:
        if options["conversation"] is not None:
            try:
                conversation = Conversation.objects.select_related("owner", "profile").get(
                    pk=options["conversation"]
                )
            except Conversation.DoesNotExist:
                raise CommandError(f"No conversation {options['conversation']}.") from None
            if options["user"] and conversation.owner.get_username() != options["user"]:
                raise CommandError(
                    f"Conversation {conversation.pk} does not belong to {options['user']!r}."
                )
            parameters = conversation.agent_parameters()
        else:
            owner = user_named(options["user"] or "cli", create=not options["user"])
            conversation = Conversation(owner=owner)
            parameters = agent.AgentParameters()
        changes: dict[str, Any] = {}
        if options["all_tools"]:
            changes["enabled_tools"] = agent.default_registry.names()
        elif options["tool"]:
            changes["enabled_tools"] = options["tool"]
        if options["system"]:
            changes["system_prompts"] = options["system"]
        if options["max_event_loops"] is not None:
            changes["max_event_loops"] = options["max_event_loops"]
        if options["temperature"] is not None:
            changes["temperature"] = options["temperature"]
        if options["model"]:
            changes["model"] = options["model"]
        try:
            parameters = parameters.changed(**changes)
        except ValidationError as exc:
            raise CommandError(validation_text(exc)) from None
        conversation.set_agent_parameters(parameters)
        conversation.save()
        return conversation
