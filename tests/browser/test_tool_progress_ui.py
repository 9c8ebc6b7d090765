"""A tool call's progress in the browser: the test MCP server's `research` tool reports progress
over streamable HTTP, and the "Looking up" indicator shows its percentage live, a reload
included; the settings warn of more tools than a request may carry and show a task-only tool as
such. Screenshots at 1440x900 and 390x844, light and dark, with axe."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from chat.agent import mcp
from chat.models import McpServer
from chat.runs.mcp import save_tools
from chat.testing.mcp_server import McpHttpServer
from chat.testing.openai_script import text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.browser.test_mcp_ui import docs_server, on_provider
from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPLY = "Sixty sources read: deploys run from main."
PROGRESS = re.compile(r"Looking up: Research · \d+%")


@pytest.fixture(scope="module")
def docs_http() -> Iterator[McpHttpServer]:
    with McpHttpServer("docs") as server:
        yield server


def test_the_indicator_shows_an_mcp_tools_progress_live(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer, docs_http: Any
) -> None:
    docs_server(docs_http.url)
    made = on_provider(login(), fake_openai, "docs__research", allow=["docs__research"])
    arguments = '{"topic": "deploys", "steps": 60, "pause": 0.4}'
    fake_openai.enqueue(tool_turn([("c1", "docs__research", arguments)]), text_turn(REPLY))
    page.goto(f"{live_server_url}/c/{made.pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)
    page.locator("#message").fill("Research how deploys work")
    page.locator("#message").press("Enter")
    indicator = page.locator(".indicator")
    expect(indicator).to_have_text(PROGRESS, timeout=10_000)
    first = int(re.findall(r"(\d+)%", indicator.inner_text())[0])
    expect(indicator).not_to_contain_text(f"· {first}%", timeout=5_000)  # it moves on, live

    def check(page: Page) -> None:
        page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)
        expect(page.locator(".indicator")).to_have_text(PROGRESS, timeout=5_000)

    look(page, "tool-progress", check)

    expect(page.locator(".message.assistant .text").last).to_contain_text(REPLY, timeout=40_000)
    expect(page.locator(".indicator")).to_have_count(0)


def test_the_settings_warn_of_too_many_tools_and_show_a_task_only_one(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer
) -> None:
    server = McpServer.objects.create(
        name="filler", transport="http", url="http://127.0.0.1:9/mcp", status="up"
    )
    tools = [mcp.ServerTool(f"filler_{n:03d}", f"A small tool ({n}).", {}) for n in range(130)]
    tools.append(mcp.ServerTool("research_task", "Long research.", {}, task_support="required"))
    save_tools(server.pk, tools)
    made = on_provider(login(), fake_openai, "get_current_time", "filler__*")
    page.goto(f"{live_server_url}/c/{made.pk}/settings/")

    def check(page: Page) -> None:
        warning = page.locator("#tool-limit")
        expect(warning).to_have_text(
            "These choices offer 131 tools; the most a request may carry is 128. By source: "
            "filler (130), built-in (1). A run fails with them: turn some off."
        )
        expect(page.get_by_role("group", name="Enabled tools")).to_have_accessible_description(
            re.compile(r"^These choices offer 131 tools")
        )
        task_only = page.get_by_label("Research task (runs only as an MCP task)")
        expect(task_only).to_be_disabled()
        expect(task_only).not_to_be_checked()

    look(page, "tool-limit-settings", check)
