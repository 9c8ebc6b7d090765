"""`manage.py mcp edit`: a stored MCP server changed in place (its tools and the conversations
that chose them are kept), checked as `mcp add` checks a new one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from chat.models import McpServer
from chat.runs import mcp as servers

FIELDS = ("url", "command", "args", "headers", "env", "timeout", "enabled", "transport")
"""What an edit may change (a server's name starts its tools' names, so it stays)."""


def pairs(items: Sequence[str], flag: str, form: str) -> dict[str, str]:
    """`["Authorization=AGENTLAB_MCP_KEY_DOCS"]` -> {"Authorization": "AGENTLAB_MCP_KEY_DOCS"};
    CommandError naming the flag when an item is not NAME=VARIABLE."""
    found = {}
    for item in items:
        key, sign, variable = item.partition("=")
        if not sign or not key.strip() or not variable.strip():
            raise CommandError(f"{flag} {item!r}: expected {form}, e.g. {flag} {form}.")
        found[key.strip()] = variable.strip()
    return found


def edited(server: McpServer, options: dict[str, Any]) -> list[str]:
    """Apply the options to `server` (not saved) and say what changed, one phrase each;
    CommandError, with `server` left as it was in the database, when the result is refused."""
    before = {field: getattr(server, field) for field in FIELDS}
    url, command = options.get("url"), options.get("server_command")
    if url and command:
        raise CommandError("Give either --url (streamable HTTP) or --command (stdio), not both.")
    if url:
        server.transport, server.url = McpServer.Transport.HTTP, url.strip()
        server.command, server.args, server.env = "", [], {}
    elif command:
        try:
            server.command, server.args = servers.parse_command(command)
        except ValueError as exc:
            raise CommandError(f"--command cannot be read: {exc}.") from None
        server.transport, server.url, server.headers = McpServer.Transport.STDIO, "", {}
    http = server.transport == McpServer.Transport.HTTP
    if options.get("header") or options.get("remove_header"):
        if not http:
            raise CommandError("--header is for an HTTP server (--url); for stdio use --env.")
        server.headers = _changed(
            server.headers,
            pairs(options["header"], "--header", "HEADER=ENV_VAR"),
            options["remove_header"],
            "--remove-header",
        )
    if options.get("env") or options.get("remove_env"):
        if http:
            raise CommandError("--env is for a stdio server (--command); over HTTP use --header.")
        server.env = _changed(
            server.env,
            pairs(options["env"], "--env", "NAME=ENV_VAR"),
            options["remove_env"],
            "--remove-env",
        )
    if options.get("timeout") is not None:
        server.timeout = options["timeout"]
    if options.get("enabled") is not None:
        server.enabled = options["enabled"]
    if problems := servers.config_problems(server):
        raise CommandError(" ".join(problems))
    try:
        server.full_clean(exclude=["name"], validate_unique=False)
    except ValidationError as exc:
        raise CommandError(
            "; ".join(f"{field}: {' '.join(texts)}" for field, texts in exc.message_dict.items())
        ) from None
    return [
        _said(field, before[field], getattr(server, field)) for field in _changes(before, server)
    ]


def _changed(
    current: dict[str, str], added: dict[str, str], removed: Sequence[str], flag: str
) -> dict[str, str]:
    result = {**current, **added}
    for name in removed:
        if name not in result:
            raise CommandError(f"{flag} {name}: the server has no {name!r} to remove.")
        del result[name]
    return result


def _changes(before: dict[str, Any], server: McpServer) -> list[str]:
    return [field for field in FIELDS if before[field] != getattr(server, field)]


def _said(field: str, old: Any, new: Any) -> str:
    if field == "enabled":
        return "enabled" if new else "disabled"
    if isinstance(new, dict):
        names = sorted(set(old) | set(new))
        changed = [name for name in names if old.get(name) != new.get(name)]
        return f"{field}: {', '.join(changed)}"
    return f"{field}: {new if new not in ('', []) else '(none)'}"
