"""manage.py chat: one user turn through the same run path the web uses, from the terminal."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from pydantic import ValidationError

from chat import access, agent, agents, runs
from chat.agent.contracts import validation_text
from chat.management import approvals
from chat.management.terminal import (
    RunPrinter,
    finish,
    run_summary,
    run_to_end,
    unsent_key_note,
    user_named,
)
from chat.models import Conversation, Run, RunStatus
from chat.runs import mcp
from chat.transcripts import attachments as stored_files
from chat.transcripts import files, versions


class Command(BaseCommand):
    help = (
        "Send one message to the agent, stream the reply, and store the conversation. With "
        "--edit N, the message replaces user message N of --conversation as a new version; with "
        "--regenerate, the last user message is sent again for a new version of its reply. "
        "With --agent, a new conversation starts from that agent version's settings. A tool "
        "call that waits for approval is asked for at the terminal (without one: denied, unless "
        "--approve TOOL or --approve-all allows it), and the run goes on here."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("message", nargs="?", help="The user message (none with --regenerate).")
        parser.add_argument("--conversation", type=int, help="Continue this conversation (id).")
        parser.add_argument(
            "--attach",
            action="append",
            default=[],
            metavar="FILE",
            help="Send a file with the message (repeatable, at most 10): an image (PNG, JPEG, "
            "GIF, WebP), a text file or a PDF, checked as the web's composer checks them.",
        )
        parser.add_argument(
            "--edit",
            type=int,
            metavar="N",
            help="Edit and resend user message N (its index in the admin) as a new version.",
        )
        parser.add_argument(
            "--regenerate",
            action="store_true",
            help="Send the last user message again: a new version of the last reply.",
        )
        parser.add_argument(
            "--user",
            help="Owner of a new conversation (default: 'cli', created if missing); with "
            "--conversation, who writes in it: only its owner may.",
        )
        parser.add_argument(
            "--agent",
            metavar="NAME[@N]",
            help="Start a new conversation from an agent's published version (NAME) or version "
            "N (NAME@N): its endpoint, model, prompts, pre-messages, tools and parameters.",
        )
        parser.add_argument("--base-url", help="OpenAI-compatible base URL (default: settings).")
        parser.add_argument(
            "--api-key",
            help="API key (default: OPENAI_API_KEY, which is sent only to OPENAI_BASE_URL: to "
            "another --base-url, no key unless this is given).",
        )
        parser.add_argument("--model", help="Model name (default: AGENTLAB_MODEL).")
        parser.add_argument(
            "--tool",
            action="append",
            default=[],
            metavar="NAME",
            help="Enable a tool (repeat); an MCP server's as SERVER__TOOL, all of them as "
            "'SERVER__*'.",
        )
        parser.add_argument(
            "--all-tools",
            action="store_true",
            help="Enable every tool: the built-in ones and every enabled MCP server's.",
        )
        parser.add_argument(
            "--system", action="append", default=[], metavar="TEXT", help="A system prompt."
        )
        parser.add_argument("--max-event-loops", type=int, help="Model turns per run (1-50).")
        parser.add_argument("--temperature", type=float, help="Sampling temperature (0-2).")
        parser.add_argument(
            "--approve",
            action="append",
            default=[],
            metavar="TOOL",
            help="Approve the calls of this tool (repeat; its name as the model sees it) without "
            "asking. Other calls that wait for approval are asked for at a terminal, and denied "
            "without one.",
        )
        parser.add_argument(
            "--approve-all", action="store_true", help="Approve every call without asking."
        )
        parser.add_argument(
            "--json", action="store_true", help="Print one JSON object instead of streaming."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        _check_agent(options)
        _check_arguments(options)
        attached = _admitted(options["attach"])
        if options["agent"] is not None:
            conversation, version_from = self._from_agent(options), None
        else:
            conversation, parameters = self._conversation(options)
            version_from = _version_from(conversation, options)
            self._configure(conversation, parameters, options)
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
        try:
            runs.check_images(target, [admitted.attachment for admitted in attached])
        except runs.RunRefused as exc:
            raise CommandError(str(exc)) from None
        printer = None if options["json"] else RunPrinter(self.stdout, self.stderr)
        run = run_to_end(
            conversation=conversation,
            user=conversation.owner,
            content=options["message"],
            client=client,
            printer=printer,
            version_from=version_from,
            attachments=[stored_files.store(admitted) for admitted in attached],
        )
        approver = approvals.Approver(
            user=conversation.owner,
            # Questions on stderr with --json: stdout stays one JSON object.
            out=self.stderr if options["json"] else self.stdout,
            approved=options["approve"],
            everything=options["approve_all"],
            interactive=sys.stdin.isatty(),
        )
        while run.status == RunStatus.REQUIRES_ACTION and self._decided(approver, run):
            resumed = approvals.resume_here(
                run, client=runs.build_client(target, api_key=options["api_key"]), printer=printer
            )
            if resumed is None:
                raise CommandError(
                    f"Run {run.pk} was resumed by a server process: follow it in the web."
                )
            run = resumed
        run.refresh_from_db()
        point = None if version_from is None else versions.points(conversation).get(version_from)
        if options["json"]:
            summary = {**run_summary(run), "version": asdict(point) if point else None}
            if options["agent"] is not None:
                started = conversation.agent_version
                summary["agent"] = {
                    "name": started.agent.name if started else agents.DEFAULT.name,
                    "version": started.number if started else None,
                }
            self.stdout.write(json.dumps(summary, ensure_ascii=False, indent=2))
        elif point is not None:
            self.stdout.write(f"version {point.number} of {point.total} from message {point.index}")
        finish(run, label=client.label, stdout=self.stdout, as_json=options["json"])

    def _decided(self, approver: approvals.Approver, run: Run) -> bool:
        """Whether the run goes on once its waiting calls are decided; Ctrl-C leaves the
        undecided ones waiting (the command's last line says how to decide them)."""
        try:
            return approver.decide(run)
        except KeyboardInterrupt:
            self.stdout.write("")
            return False

    def _conversation(self, options: dict[str, Any]) -> tuple[Conversation, agent.AgentParameters]:
        """The conversation to continue, or a new one (not saved yet), and its settings."""
        if options["conversation"] is not None:
            try:
                conversation = Conversation.objects.select_related("owner", "profile").get(
                    pk=options["conversation"]
                )
            except Conversation.DoesNotExist:
                raise CommandError(f"No conversation {options['conversation']}.") from None
            writer = user_named(options["user"]) if options["user"] else None
            refused = writer is not None and access.denied(
                writer, access.Action.WRITE, conversation
            )
            if refused:
                raise CommandError(
                    f"Conversation {conversation.pk}, as {options['user']!r}: {refused}"
                )
            return conversation, conversation.agent_parameters()
        owner = user_named(options["user"] or "cli", create=not options["user"])
        return Conversation(owner=owner), agent.AgentParameters()

    def _from_agent(self, options: dict[str, Any]) -> Conversation:
        """A new conversation of --user's (default 'cli') from the version --agent names, as
        the web starts one: the rule decides who may use it."""
        owner = user_named(options["user"] or "cli", create=not options["user"])
        try:
            version = agents.find_version(owner, options["agent"])
            return agents.start_conversation(user=owner, version=version)
        except agents.AgentRefused as exc:
            raise CommandError(str(exc)) from None

    def _configure(
        self,
        conversation: Conversation,
        parameters: agent.AgentParameters,
        options: dict[str, Any],
    ) -> None:
        """Apply the settings options to the conversation and save it."""
        changes: dict[str, Any] = {}
        if options["all_tools"]:
            built_in = agent.default_registry.built_in_names()
            changes["enabled_tools"] = [*built_in, *mcp.whole_servers()]
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
            parameters = parameters.changed(known_tools=mcp.known_tool_names(), **changes)
        except ValidationError as exc:
            raise CommandError(validation_text(exc)) from None
        conversation.set_agent_parameters(parameters)
        conversation.save()


AGENT_CONFLICTS = {
    "conversation": "--conversation",
    "edit": "--edit",
    "regenerate": "--regenerate",
    "base_url": "--base-url",
    "model": "--model",
    "tool": "--tool",
    "all_tools": "--all-tools",
    "system": "--system",
    "max_event_loops": "--max-event-loops",
    "temperature": "--temperature",
}
"""The options a version's settings answer already: given with --agent, they would contradict
them (or continue another conversation)."""


def _check_agent(options: dict[str, Any]) -> None:
    """--agent starts a new conversation with exactly the version's settings: refused with an
    option that would change them."""
    if options["agent"] is None:
        return
    given = [flag for name, flag in AGENT_CONFLICTS.items() if _given(options[name])]
    if given:
        raise CommandError(
            f"--agent starts a new conversation with exactly that version's settings: leave out "
            f"{', '.join(given)} (for other settings, make a version: manage.py agents version)."
        )


def _given(value: Any) -> bool:
    """Whether an option was given: `--edit 0` and `--temperature 0` are."""
    return value is not None and value is not False and value != []


def _check_arguments(options: dict[str, Any]) -> None:
    """The message and the version options go together as one of: a message; --edit N with a
    message; --regenerate without one. Versions are made in an existing --conversation."""
    editing, regenerating = options["edit"] is not None, options["regenerate"]
    if editing and regenerating:
        raise CommandError("--edit and --regenerate exclude each other: choose one.")
    if (editing or regenerating) and options["conversation"] is None:
        flag = "--edit" if editing else "--regenerate"
        raise CommandError(f"{flag} makes a version of a conversation: give --conversation ID.")
    if regenerating and options["message"] is not None:
        raise CommandError("--regenerate sends the last user message again: give no message.")
    if editing and options["message"] is None:
        raise CommandError("--edit N needs the new text: give it as the message.")
    if not regenerating and options["message"] is None:
        raise CommandError("Give the message to send (or --regenerate).")
    if options["attach"] and (editing or regenerating):
        raise CommandError(
            "--attach goes with a new message: a new version keeps the files its message had."
        )


def _admitted(paths: list[str]) -> list[files.Admitted]:
    """Every --attach file through the gate, before anything is stored or sent."""
    try:
        files.check_count(len(paths))
        return [_read(path) for path in paths]
    except files.Refused as exc:
        raise CommandError(str(exc)) from None


def _read(path: str) -> files.Admitted:
    name = Path(path).name
    try:
        with open(path, "rb") as handle:
            files.check_size(files.checked_name(name), os.fstat(handle.fileno()).st_size)
            data = handle.read(files.max_bytes() + 1)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        raise files.Refused(f"{path}: {exc.strerror or 'cannot be read'}.") from None
    return files.admit(name, data)


def _version_from(conversation: Conversation, options: dict[str, Any]) -> int | None:
    """The message index the new version starts at, checked before anything is written (the
    run checks it again under the conversation's lock)."""
    if options["edit"] is None and not options["regenerate"]:
        return None
    rows = list(conversation.messages.active())
    try:
        if options["regenerate"]:
            return versions.last_start(rows).index
        return versions.start_of(rows, options["edit"], edit=True).index
    except versions.VersionRefused as exc:
        raise CommandError(str(exc)) from None
