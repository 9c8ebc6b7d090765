"""Sharing with the team, with two users in two browsers: the owner shares, a teammate reads
(live too) and writes nothing, the owner takes it back."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from playwright.sync_api import Browser, Page, expect

from chat.testing import factories as make
from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def page_of(browser: Browser, base: str, username: str) -> Page:
    user = get_user_model().objects.create_user(username, password="pw-123456789")
    client = Client()
    client.force_login(user)
    context = browser.new_context()
    context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": base}]
    )
    return context.new_page()


def test_share_read_live_and_take_back(
    page: Page, browser: Browser, live_server_url: str, login: Any
) -> None:
    owner = login()
    made = make.new_conversation(owner, "Release checklist")
    page.goto(f"{live_server_url}/c/{made.pk}/")
    page.locator("#message").fill("What time is it?")
    page.locator("#message").press("Enter")
    expect(page.locator(".message.assistant .pill")).to_have_count(1, timeout=10_000)
    page.get_by_text("Rename, share or delete").click()
    page.get_by_role("button", name="Share with the team").click()
    expect(page.locator(".share-menu summary")).to_have_text("Shared with the team")

    bob = page_of(browser, live_server_url, "bob")
    bob.goto(f"{live_server_url}/")
    bob.get_by_role("link", name="Release checklist").click()
    expect(bob.locator(".read-only-note")).to_contain_text("Shared with the team by ada")
    expect(bob.locator("#message")).to_have_count(0)
    expect(bob.get_by_role("button", name="Edit message")).to_be_hidden()
    expect(bob.get_by_role("button", name="Regenerate reply")).to_be_hidden()
    bob.get_by_role("button", name="Get current time", exact=True).click()
    expect(bob.locator(".tool-detail")).to_contain_text("get_current_time")
    expect(bob.locator(".chat")).to_have_attribute("data-socket", "open")

    page.locator("#message").fill("And leave a handoff note for Sam")
    page.locator("#message").press("Enter")
    expect(bob.get_by_text("And leave a handoff note for Sam")).to_be_visible()
    expect(bob.locator(".message.assistant .pill")).to_have_count(2, timeout=10_000)

    def check(shown: Page) -> None:
        expect(shown.locator(".read-only-note")).to_be_visible()

    look(bob, "shared-read-only", check)

    page.get_by_text("Rename, share or delete").click()
    page.get_by_role("button", name="Stop sharing").click()
    expect(bob.locator("#notice")).to_have_text("The owner stopped sharing this conversation.")
    assert bob.reload().status == 404  # type: ignore[union-attr]
    bob.context.close()
