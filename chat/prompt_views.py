"""The composer's slash commands: the prompts of the enabled MCP servers, and one prompt's text
for the arguments given, to put in the message box (static/js/prompts.js). Only someone who may
write in the conversation asks; the text is never sent from here.

Getting a prompt is async: it goes through this process's MCP hub, whose connections live in
the server's event loop (as a run's tool calls do).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from chat import access, runs
from chat.access import Action
from chat.agent import mcp
from chat.models import McpServer
from chat.runs import mcp as servers
from chat.runs import mcp_prompts
from chat.runs.mcp_prompts import Prompt, PromptError
from chat.transcripts.limits import JsonRefused, load_json

BODY_CHARS = mcp_prompts.MAX_ARGUMENTS * mcp_prompts.ARGUMENT_CHARS
"""The largest request body read: every argument at its longest."""


@login_required
@require_GET
def prompt_list(request: HttpRequest, pk: int) -> HttpResponse:
    """The prompts as the combobox's options, each with its arguments' form."""
    access.conversation(request.user, Action.WRITE, pk)
    context = {"prompts": mcp_prompts.offered(), "max_chars": mcp_prompts.ARGUMENT_CHARS}
    return render(request, "chat/prompts.html#options", context)


@login_required
@require_POST
async def prompt_get(request: HttpRequest, pk: int) -> JsonResponse:
    """`{"server", "name", "arguments"}` in; `{"text"}` out, or `{"error"}`: one line (and the
    `argument` it is about, if one)."""
    user = cast(User, await request.auser())  # login_required let only a user through
    await sync_to_async(access.conversation)(user, Action.WRITE, pk)
    try:
        server_name, name, given = _read(request.body)
        server, prompt = await sync_to_async(mcp_prompts.find)(server_name, name)
        text = await _text(server, prompt, mcp_prompts.checked_arguments(prompt, given))
    except PromptError as exc:
        answer = {"error": str(exc)} | ({"argument": exc.argument} if exc.argument else {})
        return JsonResponse(answer, status=exc.status)
    return JsonResponse({"text": text, "command": prompt.command})


def _read(body: bytes) -> tuple[str, str, Any]:
    """The request's server, prompt and arguments, through the bounded gate."""
    try:
        data = load_json(body.decode(), max_chars=BODY_CHARS)
    except (UnicodeDecodeError, JsonRefused) as exc:
        raise PromptError(f"The request cannot be read: {exc}") from None
    if not isinstance(data, dict):
        raise PromptError("The request must be a JSON object.")
    server, name = data.get("server"), data.get("name")
    if not isinstance(server, str) or not isinstance(name, str) or not server or not name:
        raise PromptError("Name the prompt: its server and its name.")
    return server, name, data.get("arguments", {})


async def _text(server: McpServer, prompt: Prompt, arguments: dict[str, str]) -> str:
    """The prompt's text from its server; PromptError saying why not (the server is down, it
    refused the arguments, the text could not be a message)."""
    connection: mcp.Connection | None = None
    try:
        connection = await servers.hub.connection(server)
        async with asyncio.timeout(server.timeout):
            result = await connection.get_prompt(prompt.name, arguments)
    except TimeoutError:
        reason = f"no answer within {server.timeout:g} s"
        raise PromptError(servers.unavailable(server.name, reason), status=502) from None
    except mcp.McpUnavailable as exc:
        if connection is not None and connection.up:  # it answered, with an error
            raise PromptError(f"MCP server {server.name}: {exc}", status=502) from None
        await sync_to_async(servers.mark)(server.pk, up=False, error=str(exc))
        raise PromptError(servers.unavailable(server.name, exc), status=502) from None
    text = mcp_prompts.prompt_text(result)
    try:
        runs.check_message(text)
    except runs.RunRefused as exc:
        raise PromptError(f"{prompt.command} gives a text that cannot be sent: {exc}") from None
    return text
