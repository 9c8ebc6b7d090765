"""manage.py chat: one user turn through the same run path the web uses, from the terminal."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from pydantic import ValidationError

from chat import agent, runs
from chat.agent import events
from chat.models import Conversation, Run


class Command(BaseCommand):
    help = "Send one message to the agent, stream the reply, and store the conversation."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("message", help="The user message.")
        parser.add_argument("--conversation", type=int, help="Continue this conversation (id).")
        parser.add_argument(
            "--user", help="Owner of a new conversation (default: 'cli', created if missing)."
        )
        parser.add_argument("--base-url", help="OpenAI-compatible base URL (default: settings).")
        parser.add_argument("--api-key", help="API key (default: OPENAI_API_KEY).")
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
        try:
            client = runs.build_client(
                base_url=options["base_url"],
                api_key=options["api_key"],
                model=options["model"],
                profile=conversation.profile if not options["base_url"] else None,
            )
        except runs.RunRefused as exc:
            raise CommandError(str(exc)) from None
        run = asyncio.run(self._run(conversation, options, client))
        run.refresh_from_db()
        if options["json"]:
            self.stdout.write(json.dumps(_summary(run), ensure_ascii=False, indent=2))
        else:
            self.stdout.write(
                f"[{client.label} · run {run.pk} {run.status} · conversation {conversation.pk} · "
                f"{run.prompt_tokens} prompt + {run.completion_tokens} completion tokens · "
                f"{run.steps} step(s) · {run.duration or 0:.2f}s]"
            )
        if run.status != "completed":
            raise CommandError(run.error or f"The run ended {run.status}.")

    def _conversation(self, options: dict[str, Any]) -> Conversation:
        User = get_user_model()
        if options["conversation"] is not None:
            try:
                conversation = Conversation.objects.select_related("owner").get(
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
            username = options["user"] or "cli"
            if options["user"]:
                try:
                    owner = User.objects.get(**{User.USERNAME_FIELD: username})
                except User.DoesNotExist:
                    raise CommandError(f"No user named {username!r}.") from None
            else:
                owner, created = User.objects.get_or_create(**{User.USERNAME_FIELD: username})
                if created:
                    owner.set_unusable_password()
                    owner.save()
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
            parameters = agent.AgentParameters.model_validate(
                {**parameters.model_dump(), **changes}
            )
        except ValidationError as exc:
            raise CommandError(runs.validation_text(exc)) from None
        conversation.set_agent_parameters(parameters)
        conversation.save()
        return conversation

    async def _run(
        self, conversation: Conversation, options: dict[str, Any], client: agent.clients.ChatClient
    ) -> Run:
        owner = await database_sync_to_async(lambda: conversation.owner)()
        listeners = [] if options["json"] else [self._print]
        try:
            handle = await runs.start_run(
                conversation=conversation,
                user=owner,
                content=options["message"],
                client=client,
                listeners=listeners,
            )
        except runs.RunRefused as exc:
            await client.aclose()
            raise CommandError(str(exc)) from None
        return await handle.task

    async def _print(self, run: Run, event: events.RunEvent) -> None:
        match event:
            case events.TextDelta(text):
                self._write(text)
            case events.TurnEnd(message) if message.content:
                self._write("\n")
            case events.ToolCallStarted(call):
                self._write(f"→ {agent.humanize(call.name)} {call.arguments or '{}'}\n")
            case events.ToolCallFinished(result):
                mark = "✓" if result.status == "completed" else "✗"
                self._write(
                    f"{mark} {agent.humanize(result.tool_call.name)} "
                    f"({result.duration:.2f}s): {_fold(result.content)}\n"
                )
            case events.ModelCallFailed(message=message):
                self._write("\n")
                self.stderr.write(f"Model call failed: {message}")

    def _write(self, text: str) -> None:
        self.stdout.write(text, ending="")
        self.stdout.flush()


def _fold(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def _summary(run: Run) -> dict[str, Any]:
    messages = list(run.messages.order_by("index"))
    final = next((m for m in reversed(messages) if m.role == "assistant"), None)
    return {
        "conversation": run.conversation_id,
        "run": run.pk,
        "status": run.status,
        "error": run.error or None,
        "model": run.model,
        "text": final.content if final is not None else None,
        "tool_calls": [
            {
                "id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
                "status": call.status,
                "result": call.result,
                "error": call.error or None,
            }
            for call in run.tool_calls.all()
        ],
        "usage": {
            "prompt_tokens": run.prompt_tokens,
            "completion_tokens": run.completion_tokens,
            "total_tokens": run.total_tokens,
        },
        "steps": run.steps,
        "duration": run.duration,
    }
