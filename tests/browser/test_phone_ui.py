"""A phone, by touch: a user message's Edit, Copy and Fork are there without hover (and come with
the pointer on a desktop, the time keeping its place), the top bar fits 390 px on one line with
Evaluations named and the theme a compact control, and a reply's footer stays within two lines
with Details open. Screenshots desktop and phone, light and dark, with axe."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from django.test import Client
from playwright.sync_api import Browser, Locator, Page, expect

from chat.models import Conversation
from chat.testing import factories as make
from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    """A touch screen: no hover, a coarse pointer."""
    return {**browser_context_args, "has_touch": True, "is_mobile": True, "viewport": PHONE}


def middle(item: Locator) -> float:
    box = item.bounding_box()
    assert box is not None
    return box["y"] + box["height"] / 2


def opened(page: Page, base: str, made: Conversation) -> None:
    page.goto(f"{base}/c/{made.pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)


def test_a_user_messages_actions_are_there_by_touch(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = make.rich_conversation(login())
    opened(page, live_server_url, made)
    assert page.evaluate("matchMedia('(hover: none)').matches")
    actions = page.locator(".message.user .message-actions").first
    edit = actions.get_by_role("button", name="Edit message")
    for control in (
        edit,
        actions.get_by_role("button", name="Copy message"),
        actions.locator(".fork-link"),
    ):
        expect(control).to_be_visible()
        expect(control).to_have_css("opacity", "1")
        box = control.bounding_box()
        assert box is not None and box["height"] >= 28, box  # room for a finger
    # The time ends the row, right under the bubble, not in the middle of it.
    time_box = actions.locator("time").bounding_box()
    fork_box = actions.locator(".fork-link").bounding_box()
    bubble = page.locator(".message.user .bubble").first.bounding_box()
    assert time_box and fork_box and bubble
    assert time_box["x"] > fork_box["x"]
    assert abs((time_box["x"] + time_box["width"]) - (bubble["x"] + bubble["width"])) < 4

    edit.tap()
    box = page.locator(".message.user.editing textarea").first
    expect(box).to_have_value("What time is it? Leave a note <b>too</b>.")
    page.locator(".message.user.editing").get_by_role("button", name="Cancel").tap()
    expect(page.locator(".message.user.editing")).to_have_count(0)


def test_a_team_reader_gets_copy_and_fork_by_touch_but_no_edit(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = make.rich_conversation(make.user("owner"))
    Conversation.objects.filter(pk=made.pk).update(shared=True)
    login()
    opened(page, live_server_url, made)
    actions = page.locator(".message.user .message-actions").first
    expect(actions.get_by_role("button", name="Copy message")).to_be_visible()
    expect(actions.get_by_role("button", name="Edit message")).to_be_hidden()


def test_on_a_desktop_the_actions_come_with_the_pointer(
    browser: Browser, live_server_url: str, login: Any
) -> None:
    made = make.rich_conversation(login())
    desktop = browser.new_context(viewport={"width": 1440, "height": 900})
    client = Client()
    client.force_login(made.owner)
    session = client.cookies["sessionid"].value
    desktop.add_cookies([{"name": "sessionid", "value": session, "url": live_server_url}])
    page = desktop.new_page()
    opened(page, live_server_url, made)
    message = page.locator(".message.user").first
    edit = message.get_by_role("button", name="Edit message")
    page.mouse.move(0, 0)
    expect(edit).to_have_css("opacity", "0")
    time_box = message.locator("time").bounding_box()
    bubble = message.locator(".bubble").bounding_box()
    assert time_box and bubble
    assert abs((time_box["x"] + time_box["width"]) - (bubble["x"] + bubble["width"])) < 4
    message.hover()
    expect(edit).to_have_css("opacity", "1")
    page.mouse.move(0, 0)
    page.keyboard.press("Tab")  # the skip link
    edit.focus()
    expect(edit).to_have_css("opacity", "1")
    desktop.close()


def test_the_top_bar_fits_a_phone_on_one_line(page: Page, live_server_url: str, login: Any) -> None:
    made = make.rich_conversation(login())
    opened(page, live_server_url, made)
    bar = page.locator(".topbar")
    evaluations = bar.get_by_role("link", name="Evaluations")
    theme = bar.get_by_label("Theme")
    logout = bar.get_by_role("button", name="Log out")
    menu = bar.get_by_role("button", name="Conversations")
    for item in (menu, bar.get_by_role("link", name="Agent Lab"), evaluations, theme, logout):
        expect(item).to_be_visible()
    expect(evaluations.locator(".topbar-label")).to_be_visible()  # a name, not a bare icon
    middles = [middle(item) for item in (menu, evaluations, theme, logout)]
    assert max(middles) - min(middles) <= 2, middles
    theme_box = theme.bounding_box()
    assert theme_box is not None and theme_box["width"] <= 44
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    height = bar.bounding_box()
    assert height is not None and height["height"] <= 52

    theme.select_option("dark")
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    expect(bar.locator(".theme-icons .theme-dark")).to_be_visible()
    expect(bar.locator(".theme-icons .theme-system")).to_be_hidden()
    theme.select_option("system")

    def check(page: Page) -> None:
        expect(page.locator(".topbar").get_by_label("Theme")).to_be_visible()

    look(page, "topbar", check)


def test_a_replys_footer_stays_within_two_lines_with_details_open(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = make.rich_conversation(login())
    opened(page, live_server_url, made)
    footer = page.locator(".message.assistant .reply-footer").first
    footer.locator(".run-details > summary").tap()
    expect(footer.locator(".timeline")).to_be_visible()

    def lines(page: Page) -> int:
        footer = page.locator(".message.assistant .reply-footer").first
        parts = footer.locator(
            ":scope > .reply-actions, :scope .annotate-marks, :scope .annotate-toggle,"
            " :scope > .reply-facts, :scope > .run-details > summary"
        )
        rows = sorted(middle(parts.nth(index)) for index in range(parts.count()))
        return 1 + sum(1 for above, below in pairwise(rows) if below - above > 8)

    assert lines(page) <= 2

    def check(page: Page) -> None:
        expect(page.locator(".message.assistant .timeline").first).to_be_visible()
        if page.viewport_size == PHONE:
            assert lines(page) <= 2

    look(page, "reply-footer-details", check)
