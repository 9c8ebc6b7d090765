"""manage.py mcp: the MCP servers agents may use as tool sources, from the terminal."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError, transaction

from chat.agent import mcp
from chat.management import mcp_edits
from chat.management.terminal import fold
from chat.models import McpServer, McpTool
from chat.models.mcp import SERVER_NAME, TASK_ONLY
from chat.runs import mcp as servers
from chat.runs import mcp_prompts
from chat.runs.providers import read_mcp_variable

LIST_TIMEOUT = 15.0
Snapshot = dict[str, tuple[str, Any, Any, bool]]
"""A server's stored tools: exposed name -> (description, input schema, annotations,
available)."""


class Command(BaseCommand):
    help = (
        "Add, list, refresh and remove MCP servers (streamable HTTP or stdio), whose tools "
        "conversations may enable as <server>__<tool>, or all of a server's as <server>__*."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        add = actions.add_parser(
            "add",
            help="Probe a server and store it with its tools.",
            description="Probe a server (initialize, tools/list) and store it with its tools. "
            "Header and environment values are read from the variables named, never stored: "
            "AGENTLAB_MCP_KEY_* or one listed in AGENTLAB_MCP_KEY_VARIABLES (a provider's key "
            "only if listed there).",
        )
        add.add_argument(
            "name", help="The server's name; its tools are offered as NAME__TOOL (docs__search)."
        )
        add.add_argument("--url", help="Streamable HTTP: the endpoint, e.g. http://host/mcp.")
        add.add_argument(
            "--header",
            action="append",
            default=[],
            metavar="HEADER=ENV_VAR",
            help="Streamable HTTP: a header whose value the variable holds (repeat).",
        )
        add.add_argument(
            "--command",
            dest="server_command",
            metavar='"CMD ARG..."',
            help="stdio: the command line that starts the server (one quoted argument).",
        )
        add.add_argument(
            "--env",
            action="append",
            default=[],
            metavar="NAME=ENV_VAR",
            help="stdio: a variable of the server's environment, from this one (repeat).",
        )
        add.add_argument(
            "--timeout",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="How long a tool call may take (default: 60).",
        )
        listing = actions.add_parser(
            "list", help="Check every enabled server now; show its status and its tools."
        )
        listing.add_argument("--json", action="store_true", help="Print one JSON document.")
        refresh = actions.add_parser(
            "refresh", help="Ask servers for their tools again and store what changed."
        )
        refresh.add_argument("name", nargs="?", help="Only this server (default: every enabled).")
        edit = actions.add_parser(
            "edit",
            help="Change a server in place (its tools and the conversations' choices stay).",
            description="Change a server's URL or command, headers, environment, timeout or "
            "whether it is enabled. The changed server is probed before anything is stored "
            "(unless it is disabled or --no-check is given); running processes reconnect with "
            "the new settings at their next run.",
        )
        edit.add_argument("name")
        edit.add_argument(
            "--url", help="Streamable HTTP: the new endpoint (a stdio server becomes an HTTP one)."
        )
        edit.add_argument(
            "--command",
            dest="server_command",
            metavar='"CMD ARG..."',
            help="stdio: the new command line (an HTTP server becomes a stdio one).",
        )
        edit.add_argument(
            "--header",
            action="append",
            default=[],
            metavar="HEADER=ENV_VAR",
            help="Set a header from a variable (repeat).",
        )
        edit.add_argument("--remove-header", action="append", default=[], metavar="HEADER")
        edit.add_argument(
            "--env",
            action="append",
            default=[],
            metavar="NAME=ENV_VAR",
            help="Set a variable of a stdio server's environment (repeat).",
        )
        edit.add_argument("--remove-env", action="append", default=[], metavar="NAME")
        edit.add_argument(
            "--timeout", type=float, metavar="SECONDS", help="How long a tool call may take."
        )
        switch = edit.add_mutually_exclusive_group()
        switch.add_argument("--enable", dest="enabled", action="store_true", default=None)
        switch.add_argument("--disable", dest="enabled", action="store_false")
        edit.add_argument(
            "--no-check", action="store_true", help="Store the change without probing the server."
        )
        remove = actions.add_parser("remove", help="Delete a server and its tools.")
        remove.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        match options["action"]:
            case "add":
                self.add_server(options)
            case "list":
                self.list_servers(as_json=options["json"])
            case "refresh":
                self.refresh_servers(options["name"])
            case "edit":
                self.edit_server(options)
            case "remove":
                self.remove_server(options["name"])

    def add_server(self, options: dict[str, Any]) -> None:
        server = _new_server(options)
        try:
            label, tools, prompts = asyncio.run(mcp_prompts.probe(servers.server_config(server)))
        except mcp.McpUnavailable as exc:
            raise CommandError(f"{server.name} did not answer initialize: {exc}") from None
        try:
            with transaction.atomic():
                server.save()
                rows = servers.save_tools(server.pk, tools)
                mcp_prompts.save_prompts(server.pk, prompts or [])
        except IntegrityError:
            raise CommandError(f"An MCP server named {server.name!r} exists already.") from None
        for variable in {**server.headers, **server.env}.values():
            if not read_mcp_variable(variable):
                self.stderr.write(f"{variable} is not set in this process: its value is not sent.")
        self.stdout.write(
            f"Added {server.name} ({server.transport}: {server.target}); the "
            f"server {label!r} lists {len(rows)} tool{'s' if len(rows) != 1 else ''}."
        )
        width = max((len(row.exposed_name) for row in rows), default=0)
        for row in rows:
            self.stdout.write(f"  {row.exposed_name.ljust(width)}  {fold(row.description, 80)}")
        self.stdout.write(
            f"Enable them in a conversation's settings, or: manage.py chat MESSAGE --tool "
            f"{rows[0].exposed_name if rows else server.name + '__TOOL'} "
            f"(or '{server.name}{mcp.SEPARATOR}{servers.WHOLE_SERVER}' for all of them)."
        )

    def list_servers(self, *, as_json: bool) -> None:
        enabled = list(McpServer.objects.filter(enabled=True))
        for pk, reason in asyncio.run(_check(enabled)).items():
            servers.mark(pk, up=not reason, error=reason)
        rows = list(McpServer.objects.prefetch_related("tools"))
        if as_json:
            document = {"servers": [_summary(server) for server in rows]}
            self.stdout.write(json.dumps(document, ensure_ascii=False, indent=2))
            return
        if not rows:
            self.stdout.write("No MCP servers. Add one with: manage.py mcp add NAME --url URL")
            return
        table = [("SERVER", "TRANSPORT", "TARGET", "STATUS", "TOOLS")]
        for server in rows:
            tools = ", ".join(_tool_label(row) for row in server.tools.all())
            table.append(
                (server.name, server.transport, server.target, _status(server), tools or "—")
            )
        widths = [max(len(line[column]) for line in table) for column in range(4)]
        for line in table:
            cells = [cell.ljust(width) for cell, width in zip(line, widths, strict=False)]
            self.stdout.write("  ".join([*cells, line[4]]).rstrip())

    def refresh_servers(self, name: str | None) -> None:
        chosen = [_server_named(name)] if name else list(McpServer.objects.filter(enabled=True))
        if not chosen:
            self.stdout.write("No enabled MCP servers to refresh.")
            return
        before = {server.pk: _snapshot(server) for server in chosen}
        results = asyncio.run(servers.refresh_all(chosen))
        down = []
        for server in chosen:
            result = results[server.pk]
            if isinstance(result, mcp.McpUnavailable):
                down.append(server.name)
                self.stdout.write(f"{server.name}: down: {result}")
                continue
            self.stdout.write(f"{server.name}: {_changes(before[server.pk], _snapshot(server))}")
        if down:
            raise CommandError(f"Not refreshed, the server did not answer: {', '.join(down)}.")

    def edit_server(self, options: dict[str, Any]) -> None:
        server = _server_named(options["name"])
        before = _snapshot(server)
        changes = mcp_edits.edited(server, options)
        if not changes:
            raise CommandError(
                "Nothing to change: give --url, --command, --header, --env, --timeout, --enable "
                "or --disable (manage.py mcp edit --help)."
            )
        tools = prompts = None
        if server.enabled and not options["no_check"]:
            try:
                _, tools, prompts = asyncio.run(mcp_prompts.probe(servers.server_config(server)))
            except mcp.McpUnavailable as exc:
                raise CommandError(
                    f"{server.name} did not answer initialize with the new settings; nothing "
                    f"was changed: {exc}"
                ) from None
        with transaction.atomic():
            server.save()
            if tools is not None:
                servers.save_tools(server.pk, tools)
            if prompts is not None:
                mcp_prompts.save_prompts(server.pk, prompts)
        self.stdout.write(f"Changed {server.name}: {'; '.join(changes)}.")
        if tools is not None:
            self.stdout.write(f"{server.name}: {_changes(before, _snapshot(server))}")

    def remove_server(self, name: str) -> None:
        server = _server_named(name)
        tools = server.tools.count()
        server.delete()
        self.stdout.write(
            f"Removed {name} and its {tools} tool{'s' if tools != 1 else ''}. Conversations "
            "that chose them keep the choice; it shows as not available."
        )


def _new_server(options: dict[str, Any]) -> McpServer:
    """The server the options describe, checked, not saved; CommandError saying what is wrong."""
    name, url, command = options["name"], options["url"], options["server_command"]
    try:
        SERVER_NAME(name)
    except ValidationError as exc:
        raise CommandError(f"{name!r} is not a server name: {exc.messages[0]}") from None
    if McpServer.objects.filter(name=name).exists():
        raise CommandError(
            f"An MCP server named {name!r} exists already (manage.py mcp remove {name} first)."
        )
    if bool(url) == bool(command):
        raise CommandError(
            'Give either --url URL (streamable HTTP) or --command "CMD ARG..." (stdio).'
        )
    if url and options["env"]:
        raise CommandError("--env is for a stdio server (--command); over HTTP use --header.")
    if command and options["header"]:
        raise CommandError("--header is for an HTTP server (--url); for stdio use --env.")
    server = McpServer(name=name, timeout=options["timeout"])
    if url:
        server.transport, server.url = McpServer.Transport.HTTP, url.strip()
        server.headers = mcp_edits.pairs(options["header"], "--header", "HEADER=ENV_VAR")
    else:
        try:
            server.command, server.args = servers.parse_command(command)
        except ValueError as exc:
            raise CommandError(f"--command cannot be read: {exc}.") from None
        server.transport = McpServer.Transport.STDIO
        server.env = mcp_edits.pairs(options["env"], "--env", "NAME=ENV_VAR")
    if problems := servers.config_problems(server):
        raise CommandError(" ".join(problems))
    try:
        server.full_clean(exclude=["name"])
    except ValidationError as exc:
        raise CommandError(
            "; ".join(f"{field}: {' '.join(texts)}" for field, texts in exc.message_dict.items())
        ) from None
    return server


def _server_named(name: str) -> McpServer:
    try:
        return McpServer.objects.get(name=name)
    except McpServer.DoesNotExist:
        raise CommandError(f"No MCP server named {name!r} (manage.py mcp list).") from None


async def _check(chosen: Sequence[McpServer]) -> dict[int, str]:
    """Each server probed at once: pk -> "" if it answered, else why not."""

    async def one(server: McpServer) -> str:
        try:
            async with asyncio.timeout(LIST_TIMEOUT):
                await mcp.probe(servers.server_config(server))
        except mcp.McpUnavailable as exc:
            return str(exc)
        except TimeoutError:
            return f"no answer within {LIST_TIMEOUT:g} s"
        return ""

    reasons = await asyncio.gather(*(one(server) for server in chosen))
    return {server.pk: reason for server, reason in zip(chosen, reasons, strict=True)}


def _status(server: McpServer) -> str:
    if not server.enabled:
        return "disabled"
    if server.status == McpServer.Status.DOWN:
        return f"down: {server.error}"
    return str(server.status)


def _tool_label(row: McpTool) -> str:
    if not row.available:
        return f"{row.exposed_name} (not listed)"
    if row.task_support == TASK_ONLY:
        return f"{row.exposed_name} (runs only as an MCP task: not offered)"
    return row.exposed_name


def _summary(server: McpServer) -> dict[str, Any]:
    return {
        "name": server.name,
        "transport": server.transport,
        "target": server.target,
        "enabled": server.enabled,
        "status": server.status,
        "error": server.error or None,
        "checked_at": server.checked_at.isoformat() if server.checked_at else None,
        "timeout": server.timeout,
        "tools": [
            {
                "exposed_name": row.exposed_name,
                "name": row.name,
                "description": row.description,
                "available": row.available,
                "offered": row.available and row.task_support != TASK_ONLY,
                "task_support": row.task_support or None,
                "input_schema": row.input_schema,
                "annotations": row.annotations,
            }
            for row in server.tools.all()
        ],
    }


def _snapshot(server: McpServer) -> Snapshot:
    rows = McpTool.objects.filter(server=server)
    return {
        row.exposed_name: (row.description, row.input_schema, row.annotations, row.available)
        for row in rows
    }


def _changes(before: Snapshot, after: Snapshot) -> str:
    """What a refresh changed, as one line: added, changed, no longer listed."""
    listed_before = {name for name, row in before.items() if row[3]}
    listed = {name for name, row in after.items() if row[3]}
    added = sorted(listed - listed_before)
    gone = sorted(listed_before - listed)
    changed = sorted(name for name in listed & listed_before if before[name] != after[name])
    parts = [f"{len(listed)} tool{'s' if len(listed) != 1 else ''}"]
    for label, names in (("added", added), ("changed", changed), ("no longer listed", gone)):
        if names:
            parts.append(f"{label}: {', '.join(names)}")
    if len(parts) == 1:
        parts.append("nothing changed")
    return "; ".join(parts)
