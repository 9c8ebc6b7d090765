"""MCP prompts as slash commands: what each server lists (kept on its row, as its tools are),
the arguments a person gives one, and its messages as the text put in the composer.

The web asks a server for a prompt through the process's hub (chat/prompt_views.py); this
module holds the rules, so the hub, the commands and the views share them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from channels.db import database_sync_to_async as sync_to_async

from chat.agent import mcp
from chat.models import McpServer
from chat.transcripts.limits import MAX_PARTS, NAME_CHARS, NOTE_CHARS, JsonRefused, storable

if TYPE_CHECKING:
    from mcp import types as mcp_types

logger = logging.getLogger(__name__)

DESCRIPTION_CHARS = 2_000
"""A prompt's or an argument's description as stored: more than a list line shows."""
MAX_ARGUMENTS = 50
"""Arguments of one prompt: a form, not a document."""
ARGUMENT_CHARS = NOTE_CHARS
"""One argument's value, as typed in the composer's small form."""


class PromptError(ValueError):
    """Why a prompt gives no text, in one line for the person who asked; `status` is the HTTP
    status that says so, `argument` the argument it is about, if one."""

    def __init__(self, message: str, *, status: int = 400, argument: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.argument = argument


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt an enabled server lists, as stored: `/server:name` in the composer."""

    server: str
    name: str
    title: str = ""
    description: str = ""
    arguments: tuple[dict[str, Any], ...] = ()

    @property
    def command(self) -> str:
        return f"/{self.server}:{self.name}"

    @property
    def usage(self) -> str:
        """`/docs:incident_summary service [severity]`: optional arguments in brackets."""
        names = [a["name"] if a.get("required") else f"[{a['name']}]" for a in self.arguments]
        return " ".join([self.command, *names])


def _bounded(prompt: mcp.ServerPrompt) -> dict[str, Any] | None:
    """A prompt as stored: descriptions cut to what a page shows; None (not kept) when its
    name or an argument's cannot be stored whole, since the server knows it only by that."""
    if not 0 < len(prompt.name) <= NAME_CHARS:
        return None
    arguments = []
    for argument in prompt.arguments[:MAX_ARGUMENTS]:
        name = str(argument.get("name") or "")
        if not 0 < len(name) <= NAME_CHARS:
            return None
        arguments.append(
            {
                "name": name,
                "description": str(argument.get("description") or "")[:DESCRIPTION_CHARS],
                "required": bool(argument.get("required")),
            }
        )
    return {
        "name": prompt.name,
        "title": prompt.title[:NAME_CHARS],
        "description": prompt.description[:DESCRIPTION_CHARS],
        "arguments": arguments,
    }


def save_prompts(server_pk: int, prompts: Sequence[mcp.ServerPrompt]) -> list[dict[str, Any]]:
    """Store the prompts a server lists now, in place of those it listed before. Each passes
    the bounded gate; one it refuses (a NUL, a lone surrogate) is left out, and logged."""
    stored: list[dict[str, Any]] = []
    seen: set[str] = set()
    for prompt in prompts[:MAX_PARTS]:
        value = _bounded(prompt)
        if value is None or value["name"] in seen:
            logger.info("MCP prompt %r not stored: its name is unusable", prompt.name[:80])
            continue
        try:
            storable(value)
        except JsonRefused as exc:
            logger.info("MCP prompt %r not stored: %s", prompt.name[:80], exc)
            continue
        seen.add(value["name"])
        stored.append(value)
    McpServer.objects.filter(pk=server_pk).update(prompts=stored)
    return stored


async def refresh_prompts(server_pk: int, connection: mcp.Connection) -> None:
    """Ask a connected server for its prompts and store them (a server without the prompts
    capability lists none); one that fails to list them keeps those stored, and it is logged."""
    try:
        prompts = await connection.list_prompts()
    except Exception as exc:  # a prompt list never fails a refresh of tools
        logger.info("MCP server %s: prompts not listed: %s", connection.config.name, exc)
        return
    await sync_to_async(save_prompts)(server_pk, prompts)


async def probe(
    config: mcp.ServerConfig,
) -> tuple[str, list[mcp.ServerTool], list[mcp.ServerPrompt] | None]:
    """Connect once and leave: (server name, tools, prompts, or None if it failed to list
    them). McpUnavailable when the server does not answer `initialize`."""
    connection = mcp.Connection(config)
    try:
        await connection.start()
        try:
            prompts: list[mcp.ServerPrompt] | None = await connection.list_prompts()
        except Exception as exc:  # the tools are what a server is added for
            logger.info("MCP server %s: prompts not listed: %s", config.name, exc)
            prompts = None
        return connection.server_name, connection.tools, prompts
    finally:
        await connection.close()


def listed(server: McpServer) -> list[Prompt]:
    """A server's stored prompts; anything stored that is not a prompt is passed over."""
    prompts = []
    for item in server.prompts if isinstance(server.prompts, list) else ():
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        arguments = tuple(
            argument
            for argument in item.get("arguments") or ()
            if isinstance(argument, dict) and isinstance(argument.get("name"), str)
        )
        prompts.append(
            Prompt(
                server=server.name,
                name=item["name"],
                title=str(item.get("title") or ""),
                description=str(item.get("description") or ""),
                arguments=arguments,
            )
        )
    return prompts


def offered() -> list[Prompt]:
    """Every prompt of every enabled server, by server then as the server lists them."""
    servers = McpServer.objects.filter(enabled=True)
    return [prompt for server in servers for prompt in listed(server)]


def find(server_name: str, name: str) -> tuple[McpServer, Prompt]:
    """The enabled server and its prompt; PromptError if no enabled server lists it."""
    server = McpServer.objects.filter(enabled=True, name=server_name).first()
    prompt = next((p for p in listed(server) if p.name == name), None) if server else None
    if server is None or prompt is None:
        command = f"/{server_name[:40]}:{name[:NAME_CHARS]}"
        raise PromptError(f"Unknown prompt {command}: no enabled MCP server lists it.", status=404)
    return server, prompt


def checked_arguments(prompt: Prompt, given: Any) -> dict[str, str]:
    """The arguments to send: only those the prompt lists, each text within ARGUMENT_CHARS,
    every required one given. An optional one left empty is not sent (the server's default
    applies); PromptError names the first problem."""
    if not isinstance(given, dict):
        raise PromptError("The arguments must be a JSON object of texts.")
    known = {argument["name"]: argument for argument in prompt.arguments}
    arguments: dict[str, str] = {}
    for name, value in given.items():
        if name not in known:
            raise PromptError(f'{prompt.command} has no argument "{name[:NAME_CHARS]}".')
        if not isinstance(value, str):
            raise PromptError(f'Argument "{name}" must be text.', argument=name)
        if len(value) > ARGUMENT_CHARS:
            raise PromptError(
                f'Argument "{name}" is {len(value):,} characters, more than the '
                f"{ARGUMENT_CHARS:,} allowed.",
                argument=name,
            )
        if value.strip():
            arguments[name] = value.strip()
    for name, argument in known.items():
        if argument.get("required") and name not in arguments:
            missing = f'Missing argument "{name}": {prompt.command} needs it.'
            raise PromptError(missing, argument=name)
    return arguments


def prompt_text(result: mcp_types.GetPromptResult | dict[str, Any]) -> str:
    """A prompt's messages as one text for the composer: text contents, user's and
    assistant's alike, and embedded text resources, a blank line apart; anything else named
    (an image is not text a message can carry)."""
    raw = result if isinstance(result, dict) else result.model_dump(mode="json", by_alias=True)
    parts = []
    for message in raw.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else [content]:
            if isinstance(block, dict):
                parts.append(_block_text(block))
    return "\n\n".join(part for part in parts if part)


def _block_text(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind == "resource":
        resource = block.get("resource") or {}
        if isinstance(resource.get("text"), str):
            return str(resource["text"])
        return f"[resource {resource.get('uri', '?')} ({resource.get('mimeType') or '?'})]"
    if kind == "resource_link":
        return f"[resource link {block.get('name') or ''} {block.get('uri', '?')}]"
    if kind in ("image", "audio"):
        return f"[{kind} ({block.get('mimeType') or '?'}), not inserted]"
    return f"[{kind or 'unknown'} content, not inserted]"
