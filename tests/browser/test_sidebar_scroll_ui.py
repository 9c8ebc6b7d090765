"""The sidebar of a long history: the latest conversations on every page, the next ones as the
list scrolls, by keyboard and without script; as a designer sees it."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from chat.models import Conversation
from chat.sidebar import PAGE
from tests.browser.test_screens import VIEWPORTS, look
from tests.test_sidebar_pages import noon

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TOPICS = [
    "Release checklist",
    "Trip to Lisbon",
    "Quarterly report draft",
    "Sourdough starter",
    "Flaky login test",
    "Rivers of Europe",
    "Interview questions for the platform team",
    "Budget for the offsite",
]
AGES = [(0, 20), (1, 10), (4, 30), (15, 60), (90, 180)]
"""(days ago, conversations): every date group, 300 conversations."""
GROUP_LABELS = ["Today", "Yesterday", "Previous 7 days", "Previous 30 days", "Older"]


def history(owner: Any) -> list[Conversation]:
    """300 conversations over every date group, most recent first."""
    moments = [noon(days) - timedelta(minutes=n * 7) for days, count in AGES for n in range(count)]
    rows = Conversation.objects.bulk_create(
        Conversation(owner=owner, title=f"{TOPICS[n % len(TOPICS)]} #{len(moments) - n}")
        for n in range(len(moments))
    )
    for row, moment in zip(rows, moments, strict=True):
        row.updated_at = moment
    Conversation.objects.bulk_update(rows, ["updated_at"])
    return rows


def open_sidebar(page: Page) -> None:
    """On a phone the sidebar is a drawer: open it."""
    toggle = page.locator("[data-drawer]")
    if toggle.is_visible():
        toggle.click()
        expect(page.locator("#sidebar")).to_have_css("transform", "none")


def scroll_list_to_end(page: Page) -> None:
    """Scroll the list (on a phone the drawer scrolls) to its last link, as a reader does."""
    page.locator("#conversation-results li a").last.scroll_into_view_if_needed()


def own_links(page: Page) -> Any:
    return page.locator("#conversation-results a[id^=conversation-link-]")


def test_scrolling_the_list_brings_the_next_pages_under_their_dates(
    page: Page, live_server_url: str, login: Any
) -> None:
    rows = history(login())
    page.goto(f"{live_server_url}/c/{rows[0].pk}/")
    links = own_links(page)
    expect(links).to_have_count(PAGE)
    expect(page.locator(f"#conversation-link-{rows[0].pk}")).to_have_attribute(
        "aria-current", "page"
    )

    scroll_list_to_end(page)
    expect(links).to_have_count(2 * PAGE)
    scroll_list_to_end(page)
    expect(links).to_have_count(3 * PAGE)

    headings = page.locator("#conversation-results").get_by_role("heading")
    expect(headings).to_have_text(GROUP_LABELS)  # each once: pages continue their group
    expect(page.get_by_role("list", name="Previous 30 days").get_by_role("link")).to_have_count(60)
    ids = [int(i.split("-")[-1]) for i in links.evaluate_all("els => els.map(e => e.id)")]
    assert ids == [row.pk for row in rows[: 3 * PAGE]]


def test_the_keyboard_reaches_show_more_and_goes_on_from_what_came(
    page: Page, live_server_url: str, login: Any
) -> None:
    rows = history(login())
    page.goto(f"{live_server_url}/c/{rows[0].pk}/")
    more = page.get_by_role("link", name="Show more conversations")
    expect(more).to_be_attached()

    page.locator(f"#conversation-link-{rows[PAGE - 1].pk}").focus()
    page.keyboard.press("Tab")  # the line's menu of actions
    page.keyboard.press("Tab")

    # The link comes into view with the focus, the next page loads, the focus goes on to it.
    expect(page.locator(f"#conversation-link-{rows[PAGE].pk}")).to_be_focused()
    expect(own_links(page)).to_have_count(2 * PAGE)
    page.keyboard.press("ArrowUp")
    expect(page.locator(f"#conversation-link-{rows[PAGE - 1].pk}")).to_be_focused()


def test_without_script_show_more_is_a_page_of_its_own(
    browser: Browser, live_server_url: str, login: Any, page: Page
) -> None:
    rows = history(login())
    cookies = page.context.cookies()
    context = browser.new_context(java_script_enabled=False)
    context.add_cookies(cookies)
    plain = context.new_page()
    plain.goto(f"{live_server_url}/c/{rows[0].pk}/")

    plain.get_by_role("link", name="Show more conversations").click()

    expect(plain).to_have_url(re.compile(r"/sidebar/mine/\?after="))
    expect(plain.get_by_role("heading", level=1)).to_have_text("Your conversations")
    expect(plain.locator("a[id^=conversation-link-]").first).to_have_text(rows[PAGE].title)
    expect(plain.locator("a[id^=conversation-link-]")).to_have_count(PAGE)
    plain.get_by_role("link", name="Show more conversations").click()
    expect(plain.locator("a[id^=conversation-link-]").first).to_have_text(rows[2 * PAGE].title)
    context.close()


def test_on_a_phone_the_drawer_scrolls_and_loads_more(
    page: Page, live_server_url: str, login: Any
) -> None:
    rows = history(login())
    page.set_viewport_size(VIEWPORTS["phone"])
    page.goto(f"{live_server_url}/c/{rows[0].pk}/")
    expect(own_links(page)).to_have_count(PAGE)
    page.wait_for_timeout(300)
    expect(own_links(page)).to_have_count(PAGE)  # the closed drawer loads nothing

    open_sidebar(page)
    scroll_list_to_end(page)

    expect(own_links(page)).to_have_count(2 * PAGE)
    # The list scrolls in a box of its own: what follows it stays a drawer's scroll away.
    box = page.locator("#conversation-results").bounding_box()
    assert box is not None and box["height"] < VIEWPORTS["phone"]["height"]
    page.locator("#sidebar").evaluate("drawer => { drawer.scrollTop = drawer.scrollHeight; }")
    expect(page.get_by_text("Rename, share or delete")).to_be_in_viewport()
    page.wait_for_timeout(300)
    expect(own_links(page)).to_have_count(2 * PAGE)


def test_screens_of_a_long_sidebar(page: Page, live_server_url: str, login: Any) -> None:
    rows = history(login())
    page.goto(f"{live_server_url}/c/{rows[0].pk}/")

    def first(shown: Page) -> None:
        open_sidebar(shown)
        expect(own_links(shown)).to_have_count(PAGE)

    def scrolled(shown: Page) -> None:
        open_sidebar(shown)
        scroll_list_to_end(shown)
        expect(own_links(shown)).to_have_count(2 * PAGE)
        # Where the second page began: the middle of Previous 7 days, no heading repeated.
        shown.locator(f"#conversation-link-{rows[PAGE - 4].pk}").scroll_into_view_if_needed()
        expect(shown.get_by_role("heading", name="Previous 7 days")).to_have_count(1)

    look(page, "sidebar-long-first", first)
    look(page, "sidebar-long-scrolled", scrolled)

    href = page.get_by_role("link", name="Show more conversations").get_attribute("href")
    page.goto(f"{live_server_url}{href}")
    look(page, "sidebar-long-no-script-page", lambda shown: None)
