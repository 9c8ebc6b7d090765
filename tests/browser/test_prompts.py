"""MCP prompts as slash commands in a browser: "/" lists a real MCP server's prompts above the
message box, the keyboard and a tap choose one, a prompt's arguments are asked in a small form,
and its text lands in the message box, not sent. Screenshots at 1440x900 and 390x844, light and
dark, with axe."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from chat.models import Conversation, McpServer, Message
from chat.runs.mcp import save_tools, server_config
from chat.runs.mcp_prompts import probe, save_prompts
from chat.testing import factories as make
from chat.testing.mcp_server import McpHttpServer
from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

INCIDENT_TEXT = (
    "Write a minor incident summary for checkout: what happened, the impact, and the follow-ups."
)


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    """A touch screen too: an option is chosen with a tap."""
    return {**browser_context_args, "has_touch": True}


def docs_server(url: str) -> McpServer:
    """The server, its tools and prompts, as `manage.py mcp add` stores them."""
    server = McpServer.objects.create(name="docs", transport="http", url=url)
    # Playwright's sync API runs an event loop in this thread: probe in another one.
    with ThreadPoolExecutor(1) as thread:
        _, tools, prompts = thread.submit(asyncio.run, probe(server_config(server))).result()
    save_tools(server.pk, tools)
    save_prompts(server.pk, prompts or [])
    return server


def opened(page: Page, made: Conversation, typed: str = "/") -> None:
    page.locator("#message").fill("")
    page.locator("#message").press_sequentially(typed)
    expect(page.get_by_role("listbox", name="Prompts from MCP servers")).to_be_visible()


def test_a_prompt_with_arguments_is_inserted_not_sent(
    page: Page, live_server_url: str, login: Any, docs_http: McpHttpServer
) -> None:
    docs_server(docs_http.url)
    made = make.new_conversation(login(), title="Checkout incident")
    page.goto(f"{live_server_url}/c/{made.pk}/")
    expect(page.locator(".chat")).to_have_attribute("data-socket", "open")
    box = page.locator("#message")

    opened(page, made)
    options = page.get_by_role("listbox").get_by_role("option")
    expect(options).to_have_count(2)
    expect(options.first).to_contain_text("/docs:standup — Start the day")
    expect(options.first).to_have_attribute("aria-selected", "true")
    expect(box).to_have_attribute("aria-activedescendant", "prompt-option-1")
    box.press("ArrowDown")
    expect(box).to_have_attribute("aria-activedescendant", "prompt-option-2")
    box.press("ArrowDown")  # round to the first again
    expect(box).to_have_attribute("aria-activedescendant", "prompt-option-1")
    box.press("Escape")
    expect(page.locator("#prompt-popup")).to_be_hidden()
    expect(box).to_have_value("/")

    # Typing narrows the list; Enter takes the prompt and asks for its arguments.
    box.press_sequentially("inc")
    expect(options).to_have_count(1)
    expect(page.get_by_role("option", name="/docs:incident_summary")).to_be_visible()
    box.press("Enter")
    service = page.get_by_role("textbox", name="service", exact=True)
    expect(service).to_be_focused()
    expect(page.get_by_role("textbox", name="severity", exact=True)).to_have_accessible_description(
        "Left empty, the server's default applies."
    )
    page.get_by_role("button", name="Insert in message").click()
    expect(page.locator("[data-prompt-error]")).to_have_text(
        'Missing argument "service": /docs:incident_summary needs it.'
    )
    expect(service).to_have_attribute("aria-invalid", "true")
    expect(service).to_be_focused()
    expect(box).to_have_value("/inc")

    service.fill("checkout")
    service.press("Enter")
    expect(box).to_have_value(INCIDENT_TEXT)
    expect(box).to_be_focused()
    expect(page.locator("#prompt-popup")).to_be_hidden()
    expect(page.locator("#prompt-status")).to_have_text(
        "/docs:incident_summary is in the message box: edit it, then send."
    )
    assert not Message.objects.filter(conversation=made).exists()
    expect(page.locator("#transcript .turn")).to_have_count(0)

    # A prompt without arguments goes in at once, with a tap.
    opened(page, made)
    page.get_by_role("option", name="/docs:standup").tap()
    expect(box).to_have_value(
        "What changed in the docs since yesterday? List the pages and who changed them."
    )
    assert not Message.objects.filter(conversation=made).exists()

    # Without a match Enter sends what was typed, as always.
    box.fill("")
    box.press_sequentially("/nothing")
    expect(page.locator("#prompt-empty")).to_have_text(
        "No prompt matches /nothing. Enter sends it as a message."
    )
    box.press("Enter")
    expect(page.locator("#transcript .message.user")).to_contain_text("/nothing")


def test_the_prompt_list_and_form_read_well(
    page: Page, live_server_url: str, login: Any, docs_http: McpHttpServer
) -> None:
    docs_server(docs_http.url)
    made = make.new_conversation(login(), title="Checkout incident")
    page.goto(f"{live_server_url}/c/{made.pk}/")

    look(page, "prompts-list", lambda page: opened(page, made))

    def form(page: Page) -> None:
        opened(page, made, "/inc")
        page.locator("#message").press("Tab")
        expect(page.get_by_role("textbox", name="service", exact=True)).to_be_focused()
        page.get_by_role("button", name="Insert in message").click()
        expect(page.locator("[data-prompt-error]")).to_contain_text('Missing argument "service"')

    look(page, "prompts-form", form)


def test_a_server_that_is_down_is_one_line_by_the_composer(
    page: Page, live_server_url: str, login: Any
) -> None:
    McpServer.objects.create(
        name="docs",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        prompts=[{"name": "standup", "description": "Start the day.", "arguments": []}],
    )
    made = make.new_conversation(login())
    page.goto(f"{live_server_url}/c/{made.pk}/")
    box = page.locator("#message")

    opened(page, made, "/stand")
    box.press("Enter")
    expect(page.locator("#notice")).to_contain_text("MCP server docs is unavailable:")
    expect(box).to_have_value("/stand")
