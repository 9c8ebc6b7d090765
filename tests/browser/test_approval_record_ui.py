"""The approval record in the browser: a denied call's pill details, an edited call's arguments
before and after, and the waterfall's wait bar in the inspector and the admin transcript.
Screenshots at 1440x900 and 390x844, light and dark, with axe."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connections
from playwright.sync_api import Locator, Page, expect

from chat.models import Conversation, Run
from chat.testing import approvals as flow
from chat.testing.openai_server import FakeOpenAIServer
from tests.browser.test_screens import look
from tests.browser.test_waterfall_ui import close_up as picture_alone

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def decided(fake: FakeOpenAIServer, owner: Any) -> Conversation:
    """The decided conversation, made in a thread of its own: the browser's event loop runs in
    this one, and the flow runs its own."""

    def make() -> Conversation:
        try:
            return flow.conversation_with_decisions(fake, owner, waited=180)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(make).result()


def close_up(page: Page, shown: Locator, name: str) -> None:
    """`shown` alone, in the middle of the screen: the sticky top bar would cover its top."""
    shown.evaluate("element => element.scrollIntoView({block: 'center'})")
    picture_alone(page, shown, name)


def test_the_pill_details_and_the_waterfall_show_each_decision(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer
) -> None:
    owner = login()
    made = decided(fake_openai, owner)
    first = Run.objects.filter(conversation=made).order_by("pk").first()
    assert first is not None
    page.goto(f"{live_server_url}/c/{made.pk}/")

    def denied(page: Page) -> None:
        turn = page.locator("article.turn").first
        turn.get_by_role("button", name="Handoff note · denied").click()
        panel = turn.locator(".tool-panel")
        expect(panel).to_contain_text(re.compile(r"Asked first · denied by ada at \d\d:\d\d"))
        expect(panel).to_contain_text("after 3 min: not before Friday")
        expect(panel.locator(".approval-record")).to_have_class(re.compile("approval-denied"))
        close_up(page, panel, "approval-denied-details")

    look(page, "approval-denied-details-page", denied)

    def edited(page: Page) -> None:
        turn = page.locator("article.turn").nth(1)
        turn.get_by_role("button", name="Handoff note", exact=True).click()
        panel = turn.locator(".tool-panel")
        expect(panel).to_contain_text("edited and approved by ada")
        before, after = panel.locator(".approval-edit pre").all()
        expect(before).to_contain_text('"note": "ship it"')
        expect(after).to_contain_text('"recipient": "ops"')
        close_up(page, panel, "approval-edited-details")

    look(page, "approval-edited-details-page", edited)

    def inspector(page: Page) -> None:
        turn = page.locator("article.turn").first
        details = turn.locator(".run-details")
        if details.get_attribute("open") is None:
            details.locator("> summary").click()
        inspect = turn.locator(".inspect")
        if inspect.get_attribute("open") is None:
            inspect.locator("> summary").click()
        picture = turn.locator(".inspector svg.waterfall:visible")
        expect(picture).to_be_visible(timeout=10_000)
        expect(picture).to_have_attribute("aria-label", re.compile(r", waited 3 min for approval$"))
        wait = picture.locator("rect.wf-wait")
        expect(wait).to_have_count(1)
        expect(wait.locator("title")).to_have_text(re.compile(r"^Waited 3 min for approval: "))
        box, model = wait.bounding_box(), picture.locator("rect.wf-model").first.bounding_box()
        assert box is not None and model is not None and box["width"] > 10 * model["width"]
        expect(picture).to_contain_text("waiting for approval")
        expect(turn.locator(".inspect-tool").first).to_contain_text("approved by ada")
        close_up(page, picture, "approval-waterfall")

    look(page, "approval-inspector", inspector)

    owner.is_staff = owner.is_superuser = True
    owner.save()
    page.goto(f"{live_server_url}/admin/chat/conversation/{made.pk}/change/")

    def admin(page: Page) -> None:
        picture = page.locator(f"#run-{first.pk} svg.waterfall:visible")
        expect(picture.locator("rect.wf-wait")).to_have_count(1)
        expect(page.locator(".chat-approval").first).to_contain_text("approved by ada")
        close_up(page, picture, "approval-waterfall-admin")

    look(page, "approval-admin", admin)
