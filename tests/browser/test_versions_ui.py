"""Versions in the browser: edit and resend, regenerate, retry, switch, copy, a second tab.

The conversation runs on a strict fake provider (a real HTTP server speaking the OpenAI
protocol), which records what the model was sent.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from chat import runs
from chat.models import Conversation, ProviderProfile, Version
from chat.testing.openai_script import MODEL, error, text_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def on_provider(owner: Any, server: FakeOpenAIServer) -> Conversation:
    profile = ProviderProfile.objects.create(
        name="fake", base_url=server.base_url, model=MODEL, available_to_everyone=True
    )
    made = Conversation.objects.create(owner=owner, profile=profile)
    made.set_agent_parameters(runs.default_parameters())
    made.save()
    return made


def say(page: Page, text: str) -> None:
    page.locator("#message").fill(text)
    page.locator("#message").press("Enter")


def counter(page: Page, turn: int = 0) -> Any:
    return page.locator(".turn").nth(turn).locator(".version-count")


def sent(server: FakeOpenAIServer, request: int) -> list[str]:
    """The contents of the messages the model was sent in one request."""
    return [m.get("content") or "" for m in server.requests[request].body["messages"]]


def test_edit_switch_reload_regenerate_and_retry(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer
) -> None:
    made = on_provider(login(), fake_openai)
    fake_openai.enqueue(
        text_turn("Paris is the capital."),
        text_turn("Berlin it is."),
        text_turn("Berlin, once more."),
        error(400, "The provider had a bad moment"),
        text_turn("Recovered."),
    )
    page.goto(f"{live_server_url}/c/{made.pk}/")
    say(page, "Capital of France?")
    expect(page.get_by_text("Paris is the capital.")).to_be_visible()

    # Edit: in place, Escape cancels, Enter sends.
    page.get_by_role("button", name="Edit message").click()
    box = page.get_by_role("textbox", name="Edit message 0")
    expect(box).to_have_value("Capital of France?")
    box.press("Escape")
    expect(box).to_be_hidden()
    page.get_by_role("button", name="Edit message").click()
    box.fill("Capital of Germany?")
    box.press("Enter")
    expect(page.get_by_text("Berlin it is.")).to_be_visible()
    expect(page.get_by_text("Paris is the capital.")).to_have_count(0)
    expect(counter(page)).to_contain_text("version 2 of 2")
    expect(page.locator(".conversation-list li")).to_have_count(1)

    # Switch back and forth, then reload: the choice is stored.
    page.get_by_role("button", name="Previous version").click()
    expect(page.get_by_text("Paris is the capital.")).to_be_visible()
    expect(page.locator(".bubble")).to_have_text("Capital of France?")
    expect(counter(page)).to_contain_text("version 1 of 2")
    expect(page.get_by_role("button", name="Previous version")).to_be_disabled()
    page.get_by_role("button", name="Next version").click()
    expect(page.get_by_text("Berlin it is.")).to_be_visible()
    page.reload()
    expect(page.get_by_text("Berlin it is.")).to_be_visible()
    expect(counter(page)).to_contain_text("version 2 of 2")

    # Regenerate: a third version of the same question.
    page.get_by_role("button", name="Regenerate reply").click()
    expect(page.get_by_text("Berlin, once more.")).to_be_visible()
    expect(counter(page)).to_contain_text("version 3 of 3")

    # Retry after a provider error: the failed attempt stays as an earlier version.
    say(page, "And its river?")
    expect(page.locator(".run-error")).to_contain_text("The provider had a bad moment")
    page.get_by_role("button", name="Retry").click()
    expect(page.get_by_text("Recovered.")).to_be_visible()
    expect(page.locator(".run-error")).to_have_count(0)
    expect(counter(page, 1)).to_contain_text("version 2 of 2")

    # The model only ever saw the active path, and the strict provider refused nothing.
    assert fake_openai.pending == 0
    assert len(fake_openai.requests) == 5
    assert sent(fake_openai, 1) == ["Capital of Germany?"]
    assert sent(fake_openai, 2) == ["Capital of Germany?"]
    assert sent(fake_openai, 4) == ["Capital of Germany?", "Berlin, once more.", "And its river?"]
    assert Version.objects.filter(conversation=made).count() == 3

    def check(page: Page) -> None:
        expect(page.get_by_text("Recovered.")).to_be_visible()
        expect(counter(page)).to_contain_text("version 3 of 3")

    look(page, "versions", check)


def test_copy_puts_the_raw_markdown_on_the_clipboard(
    page: Page, context: BrowserContext, live_server_url: str, login: Any, fake_openai: Any
) -> None:
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server_url)
    made = on_provider(login(), fake_openai)
    fake_openai.enqueue(text_turn("Use **bold** and `code`:\n\n- one\n- two"))
    page.goto(f"{live_server_url}/c/{made.pk}/")
    say(page, "Show me\nsome Markdown")
    expect(page.locator(".message.assistant strong")).to_have_text("bold")

    copy = page.locator(".reply-actions").get_by_role("button", name="Copy message")
    copy.click()
    expect(copy).to_have_text("Copied")
    clipboard = page.evaluate("navigator.clipboard.readText()")
    assert clipboard == "Use **bold** and `code`:\n\n- one\n- two"
    copy = page.locator(".message.user").get_by_role("button", name="Copy message")
    copy.click()
    expect(copy).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "Show me\nsome Markdown"


def test_a_second_tab_follows_edits_and_switches(
    page: Page, context: BrowserContext, live_server_url: str, login: Any, fake_openai: Any
) -> None:
    made = on_provider(login(), fake_openai)
    fake_openai.enqueue(text_turn("First answer."), text_turn("Second answer."))
    page.goto(f"{live_server_url}/c/{made.pk}/")
    other = context.new_page()
    other.goto(f"{live_server_url}/c/{made.pk}/")
    expect(other.locator(".chat")).to_have_attribute("data-socket", "open")
    say(page, "A question")
    expect(other.get_by_text("First answer.")).to_be_visible()

    page.get_by_role("button", name="Edit message").click()
    page.get_by_role("textbox", name="Edit message 0").fill("A better question")
    page.get_by_role("button", name="Send", exact=True).first.click()
    expect(other.get_by_text("Second answer.")).to_be_visible()
    expect(other.locator(".bubble")).to_have_text("A better question")

    page.get_by_role("button", name="Previous version").click()
    expect(other.get_by_text("First answer.")).to_be_visible()
    expect(other.locator(".version-count")).to_contain_text("version 1 of 2")
    expect(other.locator(".bubble")).to_have_text(re.compile("^A question$"))
