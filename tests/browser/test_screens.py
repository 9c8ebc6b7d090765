"""The states the durability work added, as users see them: desktop and phone, light and dark.

Each page is saved as a screenshot under var/screenshots/ (to look at, as a designer would) and
checked with axe: no serious or critical accessibility violation.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.conf import settings
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from chat import agent, runs, transcripts
from chat.models import Conversation, Run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENS = Path(settings.VAR_DIR) / "screenshots"
VIEWPORTS = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}
PASSWORD = "pw-123456789"


def look(page: Page, name: str, check: Callable[[Page], None]) -> None:
    """Every viewport and colour scheme: the check holds, a screenshot, no serious axe finding."""
    SCREENS.mkdir(parents=True, exist_ok=True)
    for viewport, size in VIEWPORTS.items():
        for scheme in ("light", "dark"):
            page.set_viewport_size(size)
            page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
            page.reload()
            page.mouse.move(0, 0)  # no hover state left over from the last click
            check(page)
            page.evaluate("window.scrollTo(0, 0)")  # a sticky bar would sit mid-page otherwise
            page.screenshot(path=SCREENS / f"{name}-{viewport}-{scheme}.png", full_page=True)
            violations = Axe().run(page).response["violations"]
            serious = [v for v in violations if v["impact"] in ("serious", "critical")]
            where = [(v["id"], [n["html"][:120] for n in v["nodes"][:3]]) for v in serious]
            assert serious == [], (name, viewport, scheme, where)


def interrupted_conversation(owner: Any) -> Conversation:
    """A reply cut short by a server stop, after a pasted message far longer than a screen."""
    made = Conversation.objects.create(owner=owner, title="A story, interrupted")
    made.set_agent_parameters(runs.default_parameters())
    made.save()
    run = Run.objects.create(
        conversation=made, status="interrupted", error=runs.INTERRUPTED, model="scripted"
    )
    pasted = "A very long paste. " * 4_000
    transcripts.append_messages(
        made,
        [
            agent.ChatMessage(role="user", content=pasted),
            agent.ChatMessage(role="assistant", content="Once upon a time, a lab kept every word"),
        ],
        run=run,
    )
    return made


def test_an_interrupted_reply_and_a_folded_message(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = interrupted_conversation(login())
    page.goto(f"{live_server_url}/c/{made.pk}/")

    def check(page: Page) -> None:
        expect(page.get_by_text("Once upon a time, a lab kept every word")).to_be_visible()
        expect(page.locator(".run-error")).to_contain_text("Interrupted")
        expect(
            page.get_by_role("link", name=re.compile(r"read all 76,000 characters"))
        ).to_be_visible()

    look(page, "interrupted-reply", check)


def test_a_chosen_tool_that_is_not_available_here(
    page: Page, live_server_url: str, login: Any
) -> None:
    owner = login()
    made = Conversation.objects.create(
        owner=owner, parameters={"enabled_tools": ["get_current_time", "module_tool"]}
    )
    page.goto(f"{live_server_url}/c/{made.pk}/settings/")

    def check(page: Page) -> None:
        tool = page.get_by_label("Module tool (not available here)")
        expect(tool).to_be_checked()

    look(page, "unavailable-tool", check)


def test_a_locked_out_login(page: Page, live_server_url: str) -> None:
    get_user_model().objects.create_user("locked", password=PASSWORD)
    page.goto(f"{live_server_url}/login/")
    for _ in range(5):
        page.get_by_label("Username").fill("locked")
        page.get_by_label("Password").fill("wrong password")
        page.get_by_role("button", name="Log in").click()

    def check(page: Page) -> None:
        expect(page.get_by_role("alert")).to_contain_text("Too many failed attempts")

    look(page, "login-locked", check)


def test_the_first_screen(page: Page, live_server_url: str, login: Any) -> None:
    login()
    page.goto(f"{live_server_url}/")

    def check(page: Page) -> None:
        expect(page.get_by_label("Message")).to_be_visible()

    look(page, "first-screen", check)
