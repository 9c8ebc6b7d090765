"""The "Looking up" line counts a running call's seconds in the page (static/js/elapsed.js):
"Looking up: Slow lookup · 0 s", then "· 1 s", with no frame from the server in between, and
nothing of it announced."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, WebSocket, expect

from chat.testing import factories as make
from tests.browser.test_screens import SCREENS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_looking_up_line_counts_seconds_without_frames(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = make.new_conversation(login(), tool_policies={"slow_lookup": "run"})
    frames: list[str] = []

    def socket(ws: WebSocket) -> None:
        ws.on("framereceived", lambda payload: frames.append(str(payload)))

    page.on("websocket", socket)
    page.goto(f"{live_server_url}/c/{made.pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)
    page.locator("#message").fill("Please do a slow lookup")
    page.locator("#message").press("Enter")

    indicator = page.locator(".indicator")
    expect(indicator).to_have_text("Looking up: Slow lookup · 0 s", timeout=5_000)
    expect(indicator.locator("time.elapsed")).to_have_attribute("datetime", re.compile(r"^\d{4}-"))
    before = len(frames)
    expect(indicator).to_have_text("Looking up: Slow lookup · 1 s", timeout=2_000)
    assert len(frames) == before  # the page counted: the server sent nothing for it
    page.screenshot(path=SCREENS / "looking-up-elapsed.png")
    expect(page.locator("#announce")).to_have_text("Looking up: Slow lookup")
    expect(page.locator(".indicator[aria-live], .indicator [aria-live]")).to_have_count(0)

    expect(page.locator(".message.assistant .pills .pill")).to_have_text(
        ["Slow lookup"], timeout=10_000
    )
    expect(page.locator(".indicator")).to_have_count(0)
