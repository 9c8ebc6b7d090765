"""Keyboard, screen readers, theme, the phone drawer and the connection banner, in a browser."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, WebSocketRoute, expect

from chat.models import Conversation
from chat.testing import factories as make

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SOCKET = re.compile(r"/ws/conversations/\d+/")


def say(page: Page, text: str) -> None:
    page.locator("#message").fill(text)
    page.locator("#message").press("Enter")


def test_shortcuts_stop_create_and_list(page: Page, live_server_url: str, login: Any) -> None:
    owner = login()
    made = make.new_conversation(owner, tool_policies={"slow_lookup": "run"})  # not read-only
    page.goto(f"{live_server_url}/c/{made.pk}/")
    expect(page.locator(".chat")).to_have_attribute("data-socket", "open")

    # "?" lists the shortcuts (when not typing); Escape closes the list.
    page.locator("#message").press("?")
    expect(page.locator("#message")).to_have_value("?")
    page.locator("#message").fill("")
    page.locator("#conversation-title").click()
    page.keyboard.press("?")
    dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("New conversation")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()

    # Escape stops a run.
    say(page, "do a slow lookup")
    expect(page.locator(".indicator")).to_contain_text("Slow lookup", timeout=5000)
    page.locator("#conversation-title").click()
    page.keyboard.press("Escape")
    expect(page.locator(".status-cancelled")).to_be_visible()
    expect(page.locator("#announce")).to_have_text("The reply was stopped.")

    # Ctrl+Shift+O makes a new conversation.
    page.keyboard.press("Control+Shift+O")
    expect(page).not_to_have_url(re.compile(rf"/c/{made.pk}/$"))
    assert Conversation.objects.filter(owner=owner).count() == 2


def test_screen_readers_hear_the_run_not_every_chunk(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = make.new_conversation(login())
    page.goto(f"{live_server_url}/c/{made.pk}/")
    expect(page.locator("#transcript")).to_have_attribute("aria-live", "off")
    expect(page.get_by_role("link", name="Skip to content")).to_have_attribute("href", "#main")
    for landmark in ("banner", "main", "navigation", "complementary"):
        expect(page.get_by_role(landmark).first).to_be_attached()
    say(page, "What time is it?")
    expect(page.locator("#announce")).to_have_text("The reply is finished.")
    expect(page.locator(".indicator[aria-live]")).to_have_count(0)


def test_the_theme_choice_is_kept(page: Page, live_server_url: str, login: Any) -> None:
    made = make.new_conversation(login())
    page.emulate_media(color_scheme="light")
    page.goto(f"{live_server_url}/c/{made.pk}/")
    page.get_by_label("Theme").select_option("dark")
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    page.reload()
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(19, 19, 22)"
    page.get_by_label("Theme").select_option("system")
    page.reload()
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(246, 246, 247)"


def test_the_phone_drawer_opens_and_closes(page: Page, live_server_url: str, login: Any) -> None:
    owner = login()
    first = make.new_conversation(owner, "First talk")
    make.new_conversation(owner, "Second talk")
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server_url}/c/{first.pk}/")
    link = page.get_by_role("link", name="Second talk")
    expect(link).to_be_hidden()
    toggle = page.get_by_role("button", name="Conversations")
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(link).to_be_visible()
    page.keyboard.press("Escape")
    expect(link).to_be_hidden()
    expect(toggle).to_be_focused()
    toggle.click()
    link.click()
    expect(page.locator("#conversation-title")).to_have_text("Second talk")


def test_a_lost_connection_shows_a_banner_by_the_composer(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = make.new_conversation(login())
    state = {"cut": False}

    def route(socket: WebSocketRoute) -> None:
        if state["cut"]:
            socket.close(code=1012)  # "service restart": the page reconnects
            return
        socket.connect_to_server()
        state["socket"] = socket  # type: ignore[assignment]

    page.route_web_socket(SOCKET, route)
    page.goto(f"{live_server_url}/c/{made.pk}/")
    banner = page.locator(".connection-banner")
    expect(page.locator(".chat")).to_have_attribute("data-socket", "open")
    expect(banner).to_be_hidden()

    state["cut"] = True
    state["socket"].close(code=1012)  # type: ignore[attr-defined]
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("reconnecting")
    expect(page.locator("#send")).to_be_disabled()
    page.locator("#message").fill("typed while offline")

    state["cut"] = False
    expect(banner).to_be_hidden(timeout=20_000)
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator("#message")).to_have_value("typed while offline")
