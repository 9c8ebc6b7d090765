"""MCP prompts as slash commands: stored whenever a server's tools are (the hub, the commands,
a `prompts/list_changed` notification), read through the bounded gate, and asked for by the
composer (chat/prompt_views.py) with checked arguments. Real servers from the SDK, over
streamable HTTP and stdio."""

from __future__ import annotations

import asyncio
import sys
from io import StringIO
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command

from chat.agent import mcp
from chat.models import McpServer
from chat.runs import mcp as hub_module
from chat.runs.mcp_prompts import save_prompts
from chat.testing.mcp_server import STDIO_COMMAND, McpHttpServer

pytestmark = pytest.mark.django_db(transaction=True)

INCIDENT = {
    "name": "incident_summary",
    "title": "",
    "description": "Write an incident summary for a service.",
    "arguments": [
        {"name": "service", "description": "", "required": True},
        {"name": "severity", "description": "", "required": False},
    ],
}
STANDUP = {
    "name": "standup",
    "title": "",
    "description": "Start the day: what changed since yesterday.",
    "arguments": [],
}
GROWING = """
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.prompts.base import Prompt

from chat.testing.mcp_server import build

server = build("growing")

@server.tool(description="Adds the prompt 'retro' and tells the client the list changed.")
async def grow_prompts(ctx: Context) -> str:
    retro = Prompt.from_function(lambda: "What went well?", name="retro", description="A retro.")
    server.add_prompt(retro)
    await ctx.session.send_prompt_list_changed()
    return "grown"

server.run("stdio")
"""
BARE = """
import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="ping", input_schema={"type": "object"})])

server = Server("bare", on_list_tools=list_tools)

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
"""


@database_sync_to_async
def http_server(url: str, name: str = "docs", **fields: Any) -> McpServer:
    return McpServer.objects.create(name=name, transport="http", url=url, **fields)


@database_sync_to_async
def stdio_server(name: str, *args: str, **fields: Any) -> McpServer:
    return McpServer.objects.create(
        name=name, transport="stdio", command=sys.executable, args=list(args), **fields
    )


async def stored(server: McpServer) -> list[dict[str, Any]]:
    await server.arefresh_from_db()
    return list(server.prompts)


async def test_a_refresh_stores_the_prompts_an_http_server_lists(
    docs_http: McpHttpServer, hub: hub_module.Hub
) -> None:
    server = await http_server(docs_http.url, prompts=[{"name": "gone", "arguments": []}])
    await hub.refresh(server)
    assert await stored(server) == [STANDUP, INCIDENT]


async def test_refresh_all_stores_the_prompts_of_a_stdio_server() -> None:
    server = await stdio_server("local", *STDIO_COMMAND[1:])
    results = await hub_module.refresh_all([server])
    assert not isinstance(results[server.pk], mcp.McpUnavailable)
    assert [prompt["name"] for prompt in await stored(server)] == ["standup", "incident_summary"]


async def test_a_server_without_the_prompts_capability_stores_none() -> None:
    server = await stdio_server("bare", "-c", BARE, prompts=[STANDUP])
    results = await hub_module.refresh_all([server])
    assert [tool.name for tool in results[server.pk]] == ["ping"]  # type: ignore[union-attr]
    assert await stored(server) == []


async def test_a_prompt_list_that_changes_is_stored_again(hub: hub_module.Hub) -> None:
    server = await stdio_server("growing", "-c", GROWING)
    await hub.refresh(server)
    assert "retro" not in [prompt["name"] for prompt in await stored(server)]

    connection = await hub.connection(server)
    await connection.call("grow_prompts", {})
    for _ in range(100):
        if "retro" in [prompt["name"] for prompt in await stored(server)]:
            break
        await asyncio.sleep(0.05)
    assert (await stored(server))[-1] == {
        "name": "retro",
        "title": "",
        "description": "A retro.",
        "arguments": [],
    }


def test_the_commands_store_the_prompts(docs_http: McpHttpServer) -> None:
    call_command("mcp", "add", "docs", "--url", docs_http.url, stdout=StringIO())
    server = McpServer.objects.get(name="docs")
    assert server.prompts == [STANDUP, INCIDENT]

    McpServer.objects.filter(pk=server.pk).update(prompts=[])
    call_command("mcp", "refresh", "docs", stdout=StringIO())
    assert McpServer.objects.get(pk=server.pk).prompts == [STANDUP, INCIDENT]

    McpServer.objects.filter(pk=server.pk).update(prompts=[])
    call_command("mcp", "edit", "docs", "--timeout", "30", stdout=StringIO())
    assert McpServer.objects.get(pk=server.pk).prompts == [STANDUP, INCIDENT]


def test_what_cannot_be_stored_is_left_out_and_long_texts_are_cut() -> None:
    server = McpServer.objects.create(name="odd", transport="http", url="http://127.0.0.1:9/mcp")
    kept = save_prompts(
        server.pk,
        [
            mcp.ServerPrompt(name="nul", description="a \x00 in it"),
            mcp.ServerPrompt(name="x" * 201),
            mcp.ServerPrompt(name="long", description="d" * 5_000),
            mcp.ServerPrompt(name="long", description="listed twice"),
            mcp.ServerPrompt(name="args", arguments=({"name": "a\ud800"},)),
        ],
    )
    assert [prompt["name"] for prompt in kept] == ["long"]
    assert len(kept[0]["description"]) == 2_000
    assert McpServer.objects.get(pk=server.pk).prompts == kept
