"""MCP tools in the browser: a real MCP server (the SDK's, over streamable HTTP) called by a run on
a strict fake provider; the indicator and the pill read like a built-in tool's, the details name
the server; the settings group each server's tools. Screenshots at 1440x900 and 390x844, light
and dark, with axe."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from chat.agent import mcp
from chat.models import Conversation, McpServer, McpTool, ProviderProfile, ToolCall
from chat.runs.mcp import save_tools, server_config
from chat.testing.mcp_server import McpHttpServer
from chat.testing.openai_script import MODEL, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPLY = "Waited, as asked: the docs server answered."


@pytest.fixture(scope="module")
def docs_http() -> Iterator[McpHttpServer]:
    with McpHttpServer("docs") as server:
        yield server


def docs_server(url: str) -> McpServer:
    """The server's row and the tools it lists, as staff's "Refresh tools" stores them."""
    server = McpServer.objects.create(name="docs", transport="http", url=url)
    # Playwright's sync API runs an event loop in this thread: probe in another one.
    with ThreadPoolExecutor(1) as thread:
        _, tools = thread.submit(asyncio.run, mcp.probe(server_config(server))).result()
    save_tools(server.pk, tools)
    return server


def on_provider(
    owner: Any, fake: FakeOpenAIServer, *tools: str, allow: Sequence[str] = ()
) -> Conversation:
    """A conversation on the fake provider choosing `tools`; those named in `allow` run without
    asking (the test server's tools do not say they only read; these tests are not about
    approvals)."""
    profile = ProviderProfile.objects.create(
        name="fake", base_url=fake.base_url, model=MODEL, available_to_everyone=True
    )
    made = Conversation.objects.create(owner=owner, profile=profile, title="Docs lookup")
    made.parameters = {"enabled_tools": list(tools)}  # as the settings store a choice
    if allow:
        made.parameters["tool_policies"] = dict.fromkeys(allow, "run")
    made.save()
    return made


def test_an_mcp_tool_runs_shows_its_pill_and_names_its_server(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer, docs_http: Any
) -> None:
    docs_server(docs_http.url)
    made = on_provider(
        login(), fake_openai, "docs__slow", "docs__search_docs", allow=["docs__slow"]
    )
    fake_openai.enqueue(
        tool_turn([("c1", "docs__slow", '{"seconds": 1.5}')]),
        text_turn(REPLY),
    )
    page.goto(f"{live_server_url}/c/{made.pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)
    page.locator("#message").fill("Wait a moment, then tell me")
    page.locator("#message").press("Enter")

    expect(page.locator(".indicator")).to_contain_text("Looking up: Slow", timeout=10_000)
    expect(page.locator(".message.assistant .text")).to_contain_text(REPLY, timeout=10_000)
    pills = page.locator(".message.assistant .pills .pill")
    expect(pills).to_have_text(["Slow"])
    page.reload()
    expect(pills).to_have_text(["Slow"])

    offered = [tool["function"]["name"] for tool in fake_openai.requests[0].body["tools"]]
    assert sorted(offered) == ["docs__search_docs", "docs__slow"]
    assert fake_openai.pending == 0
    call = ToolCall.objects.get()
    assert (call.status, call.server, call.result) == ("completed", "docs", "waited 1.5 s")

    def check(page: Page) -> None:
        pill = page.get_by_role("button", name="Slow", exact=True)
        pill.click()
        detail = page.locator(".tool-detail")
        expect(detail).to_contain_text("MCP server docs")
        expect(detail).to_contain_text("Raw result, as MCP server docs sent it")
        expect(detail).to_contain_text('"text": "waited 1.5 s"')
        expect(pill).to_have_attribute("aria-expanded", "true")

    look(page, "mcp-tool-detail", check)

    def inspect(page: Page) -> None:
        details = page.locator(".run-details")
        if details.get_attribute("open") is None:
            details.locator("> summary").click()
        page.locator(".inspect > summary").click()
        expect(page.locator(".inspect-tool")).to_contain_text("docs__slow · MCP server docs")

    look(page, "mcp-inspector", inspect)


def test_the_settings_group_each_servers_tools(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer, docs_http: Any
) -> None:
    docs_server(docs_http.url)
    wiki = McpServer.objects.create(
        name="wiki",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        status=McpServer.Status.DOWN,
        error="ConnectError: All connection attempts failed",
    )
    McpTool.objects.create(
        server=wiki, name="find_page", exposed_name="wiki__find_page", description="Find a page."
    )
    made = on_provider(
        login(),
        fake_openai,
        "get_current_time",
        "docs__slow",
        "docs__search_docs",
        "wiki__find_page",
    )
    page.goto(f"{live_server_url}/c/{made.pk}/settings/")

    def check(page: Page) -> None:
        docs = page.get_by_role("group", name="docs · MCP server")
        expect(docs).to_contain_text("Up.")
        expect(docs.get_by_label("All tools of docs")).not_to_be_checked()
        expect(docs.get_by_label("Slow", exact=True)).to_be_checked()
        expect(docs.get_by_label("Search docs", exact=True)).to_be_checked()
        expect(docs.get_by_label("Add", exact=True)).not_to_be_checked()
        expect(docs.get_by_label("Search docs", exact=True)).to_have_accessible_description(
            re.compile(r"^docs__search_docs · Search the team docs")
        )
        wiki = page.get_by_role("group", name="wiki · MCP server")
        expect(wiki).to_contain_text("Down: ConnectError: All connection attempts failed")
        expect(wiki.get_by_label("Find page (not available: server down)")).to_be_checked()

    look(page, "mcp-settings", check)

    # Saving keeps the unavailable choice; choosing the whole server adds `docs__*`.
    page.get_by_label("All tools of docs").check()
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#settings-status")).to_contain_text("Saved.")
    made.refresh_from_db()
    assert made.parameters["enabled_tools"] == [
        "get_current_time",
        "docs__*",
        "docs__search_docs",
        "docs__slow",
        "wiki__find_page",
    ]
