"""An MCP server's configuration: what may be stored (the one check the admin form and
`manage.py mcp` share) and the connection settings made from it, secrets resolved."""

from __future__ import annotations

import math
import re
import shlex
from typing import Any

from chat.agent import mcp
from chat.models import McpServer
from chat.transcripts.limits import MAX_PARTS, NAME_CHARS, JsonRefused, storable

from .providers import mcp_variable_problem, read_mcp_variable

HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
"""A header's name: an HTTP token (RFC 9110)."""
VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""A name in a stdio server's environment."""
STORED: dict[str, type] = {"url": str, "command": str, "args": list, "headers": dict, "env": dict}
"""The fields a person supplies, and the shape each holds."""
SHAPES: dict[type, str] = {
    str: "Enter a text.",
    list: 'Enter a list of strings, e.g. ["-m", "docs_server"].',
    dict: 'Enter an object of names and variable names, e.g. {"Authorization": '
    '"AGENTLAB_MCP_KEY_DOCS"}.',
}


def config_problems(server: McpServer) -> list[str]:
    """What is wrong with a server's configuration, one line each, "field: why" (empty:
    nothing). The admin form and `manage.py mcp add` refuse such a configuration, and
    `server_config` connects with none."""
    problems = [
        f"{field}: {problem}"
        for field, shape in STORED.items()
        if (problem := _stored_problem(getattr(server, field), shape))
    ]
    if problems:
        return problems
    if server.transport == McpServer.Transport.HTTP:
        if not server.url.startswith(("http://", "https://")):
            problems.append("url: an http:// or https:// address is needed.")
        field, variables, pattern = "headers", server.headers, HEADER_NAME
    else:
        if not server.command.strip():
            problems.append("command: the program to start is needed.")
        field, variables, pattern = "env", server.env, VARIABLE_NAME
    for name, variable in variables.items():
        if not pattern.match(name) or len(name) > NAME_CHARS:
            problems.append(f"{field}: {name!r} is not a name that can be set there.")
        elif problem := mcp_variable_problem(variable):
            problems.append(f"{field}: {name}: {problem}")
    if not math.isfinite(server.timeout) or server.timeout <= 0:
        problems.append("timeout: a positive number of seconds is needed.")
    return problems


def _stored_problem(value: Any, shape: type) -> str | None:
    """Why a configuration field cannot be stored as it is: its shape (a text, a list of
    texts, names to variable names), then the bounded JSON gate every stored input passes."""
    texts: list[Any] = _texts(value) if isinstance(value, shape) else [None]
    if not all(isinstance(text, str) for text in texts):
        return SHAPES[shape]
    if len(texts) > MAX_PARTS:
        return f"{len(texts):,} texts, more than the {MAX_PARTS:,} allowed."
    try:
        storable(value)
    except JsonRefused as exc:
        return f"{exc.reason}."
    return None


def _texts(value: Any) -> list[Any]:
    """A text itself, a list's items, or an object's names and values."""
    if isinstance(value, dict):
        return [*value, *value.values()]
    return list(value) if isinstance(value, list) else [value]


def server_config(server: McpServer) -> mcp.ServerConfig:
    """The connection settings, with header and environment values read from the MCP-allowed
    variables they name (an unset one is left out).

    McpUnavailable, before anything is started or sent, when the configuration is refused:
    a row stored before the rules, or written straight into the database, never sends a
    provider's key or runs with a variable off the allow-list.
    """
    if problems := config_problems(server):
        raise mcp.McpUnavailable(f"its configuration is refused, nothing was sent: {problems[0]}")

    def resolved(mapping: dict[str, Any]) -> dict[str, str]:
        values = {name: read_mcp_variable(variable) for name, variable in mapping.items()}
        return {name: value for name, value in values.items() if value}

    if server.transport == McpServer.Transport.HTTP:
        headers = resolved(server.headers)
        return mcp.ServerConfig(
            name=server.name, url=server.url, headers=headers, timeout=server.timeout
        )
    return mcp.ServerConfig(
        name=server.name,
        command=server.command,
        args=tuple(str(arg) for arg in server.args or ()),
        env=resolved(server.env),
        timeout=server.timeout,
    )


def parse_command(text: str) -> tuple[str, list[str]]:
    """`"python -m docs_server --quiet"` -> ("python", ["-m", "docs_server", "--quiet"])."""
    words = shlex.split(text)
    if not words:
        raise ValueError("the command is empty")
    return words[0], words[1:]
