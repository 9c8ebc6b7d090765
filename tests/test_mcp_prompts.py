"""MCP prompts as slash commands: stored whenever a server's tools are (the hub, the commands,
a `prompts/list_changed` notification), read through the bounded gate, and asked for by the
composer (chat/prompt_views.py) with checked arguments. Real servers from the SDK, over
streamable HTTP and stdio."""

from __future__ import annotations

import asyncio
import json
import sys
from io import StringIO
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import AsyncClient, Client
from django.urls import reverse

from chat.agent import mcp
from chat.models import Conversation, McpServer
from chat.runs import mcp as hub_module
from chat.runs.mcp_prompts import prompt_text, save_prompts
from chat.testing import factories as make
from chat.testing.mcp_server import STDIO_COMMAND, McpHttpServer
from chat.testing.processes import free_port

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


# The composer's endpoints: the list (an HTML fragment of options), and one prompt's text.


@database_sync_to_async
def owned(name: str = "ada") -> tuple[User, Conversation]:
    owner = make.user(name)
    return owner, make.new_conversation(owner, title="Incident")


async def asked(
    user: User | None, conversation: Conversation, name: str, **arguments: Any
) -> tuple[int, dict[str, Any]]:
    client = AsyncClient()
    if user is not None:
        await client.aforce_login(user)
    body = {"server": "docs", "name": name, "arguments": arguments}
    response = await client.post(
        reverse("chat:prompt_get", args=[conversation.pk]),
        json.dumps(body),
        content_type="application/json",
    )
    if response["Content-Type"] != "application/json":
        return response.status_code, {}
    return response.status_code, json.loads(response.content)


def test_the_list_offers_each_enabled_servers_prompts_with_their_forms(
    client_in: Client, user: User
) -> None:
    McpServer.objects.create(
        name="docs", transport="http", url="http://127.0.0.1:9/mcp", prompts=[STANDUP, INCIDENT]
    )
    off = {"name": "hidden", "description": "Of a server turned off.", "arguments": []}
    McpServer.objects.create(
        name="off", transport="http", url="http://127.0.0.1:9/mcp", prompts=[off], enabled=False
    )
    McpServer.objects.create(
        name="odd", transport="http", url="http://127.0.0.1:9/mcp", prompts=[{"no": "name"}, 7]
    )
    made = make.new_conversation(user)

    response = client_in.get(reverse("chat:prompt_list", args=[made.pk]))

    html = response.content.decode()
    assert response.status_code == 200
    assert html.count('role="option"') == 2 and "/off:hidden" not in html
    assert 'data-command="/docs:standup"' in html and "Start the day" in html
    assert 'data-form="prompt-form-2"' in html and '<template id="prompt-form-2">' in html
    assert 'data-argument="service"' in html and 'aria-required="true"' in html
    assert "Left empty, the server's default applies." in html


async def test_a_prompt_with_arguments_gives_its_text(
    docs_http: McpHttpServer, hub: hub_module.Hub
) -> None:
    await hub.refresh(await http_server(docs_http.url))
    owner, made = await owned()

    status, answer = await asked(owner, made, "incident_summary", service=" checkout ", severity="")
    assert (status, answer["command"]) == (200, "/docs:incident_summary")
    assert answer["text"] == (
        "Write a minor incident summary for checkout: what happened, the impact, and the "
        "follow-ups."
    )
    status, answer = await asked(owner, made, "incident_summary", service="api", severity="major")
    assert answer["text"].startswith("Write a major incident summary for api:")
    status, answer = await asked(owner, made, "standup")
    assert answer["text"].startswith("What changed in the docs since yesterday?")
    assert await Conversation.objects.filter(pk=made.pk, messages__isnull=False).acount() == 0


@pytest.mark.parametrize(
    ("name", "arguments", "status", "error", "about"),
    [
        (
            "incident_summary",
            {},
            400,
            'Missing argument "service": /docs:incident_summary needs',
            "service",
        ),
        ("incident_summary", {"service": "  "}, 400, 'Missing argument "service"', "service"),
        ("incident_summary", {"service": "api", "team": "x"}, 400, 'has no argument "team"', None),
        ("incident_summary", {"service": 7}, 400, 'Argument "service" must be text.', "service"),
        ("incident_summary", {"service": "x" * 10_001}, 400, "10,001 characters", "service"),
        ("nope", {}, 404, "Unknown prompt /docs:nope: no enabled MCP server lists it.", None),
    ],
    ids=["missing", "blank", "unknown argument", "not text", "too long", "unknown prompt"],
)
async def test_what_cannot_be_asked_is_one_line_and_reaches_no_server(
    name: str, arguments: dict[str, Any], status: int, error: str, about: str | None
) -> None:
    await http_server("http://127.0.0.1:9/mcp", prompts=[STANDUP, INCIDENT])
    owner, made = await owned()
    got, answer = await asked(owner, made, name, **arguments)
    assert got == status and error in answer["error"] and "\n" not in answer["error"]
    assert answer.get("argument") == about


async def test_a_server_that_is_down_is_named_and_marked(hub: hub_module.Hub) -> None:
    server = await http_server(f"http://127.0.0.1:{free_port()}/mcp", prompts=[STANDUP])
    owner, made = await owned()

    status, answer = await asked(owner, made, "standup")

    assert status == 502
    assert answer["error"].startswith("MCP server docs is unavailable: ConnectError")
    await server.arefresh_from_db()
    assert server.status == McpServer.Status.DOWN


async def test_only_who_may_write_in_the_conversation_asks(
    docs_http: McpHttpServer, hub: hub_module.Hub
) -> None:
    await http_server(docs_http.url, prompts=[STANDUP])
    _, made = await owned()
    made.shared = True  # the team reads it; only its owner writes
    await made.asave()
    other, _ = await owned("mallory")

    assert (await asked(other, made, "standup"))[0] == 404
    assert (await asked(None, made, "standup"))[0] == 302
    listing = reverse("chat:prompt_list", args=[made.pk])
    client = AsyncClient()
    assert (await client.get(listing)).status_code == 302
    await client.aforce_login(other)
    assert (await client.get(listing)).status_code == 404


def test_a_prompts_messages_become_one_text() -> None:
    text = prompt_text(
        {
            "messages": [
                {"role": "user", "content": {"type": "text", "text": "Review this runbook."}},
                {
                    "role": "user",
                    "content": {
                        "type": "resource",
                        "resource": {"uri": "docs://deploy.md", "text": "1. Check CI."},
                    },
                },
                {"role": "assistant", "content": {"type": "text", "text": "Which part?"}},
                {
                    "role": "user",
                    "content": {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                },
            ]
        }
    )
    assert text == (
        "Review this runbook.\n\n1. Check CI.\n\nWhich part?\n\n[image (image/png), not inserted]"
    )


def test_the_admin_shows_a_servers_prompts_read_only(staff: Client) -> None:
    server = McpServer.objects.create(
        name="docs", transport="http", url="http://127.0.0.1:9/mcp", prompts=[STANDUP, INCIDENT]
    )
    page = staff.get(reverse("admin:chat_mcpserver_change", args=[server.pk])).content.decode()
    assert "<code>/docs:standup</code> Start the day" in page
    assert "<code>/docs:incident_summary service [severity]</code> Write an incident" in page
    assert 'name="prompts"' not in page
