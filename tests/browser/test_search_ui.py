"""The sidebar's search and date groups, as a keyboard user and a designer see them."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from chat import agent, transcripts
from chat.models import Conversation
from chat.testing import factories as make
from tests.browser.test_screens import VIEWPORTS, look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CONVERSATIONS = [
    # title, days since the last update, what was said
    ("Trip to Lisbon", 0, ["Plan three days in Lisbon", "Start at the castle, then walk down."]),
    ("Release checklist", 0, ["What is left before the release?", "Tag, changelog, announce."]),
    ("Sourdough starter", 1, ["My starter smells of acetone", "Feed it twice a day for a week."]),
    (
        "Rivers of Europe",
        4,
        [
            "Which rivers cross the most countries?",
            "The Danube flows through ten countries, more than any other river in the world, "
            "from the Black Forest to the Black Sea.",
        ],
    ),
    ("Quarterly report draft", 12, ["Summarise the quarter", "Revenue grew; costs held."]),
    ("Old notes about <b>markup</b>", 90, ["Keep <script>this</script> as text", "Done."]),
]


def conversations(owner: Any) -> list[Conversation]:
    """A history spread over every date group, the first one the most recent."""
    made = []
    now = timezone.now()
    # Minutes apart, but never before today's midnight: the groups hold after midnight too.
    midnight = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    for number, (title, days, texts) in enumerate(CONVERSATIONS):
        conversation = make.new_conversation(owner, title)
        roles = ["user", "assistant"]
        transcripts.append_messages(
            conversation,
            [agent.ChatMessage(role=roles[n % 2], content=text) for n, text in enumerate(texts)],
        )
        moment = max(now - timedelta(minutes=number), midnight + timedelta(seconds=20 - number))
        moment -= timedelta(days=days)
        Conversation.objects.filter(pk=conversation.pk).update(updated_at=moment)
        made.append(conversation)
    return made


def search_box(page: Page) -> Any:
    return page.get_by_role("searchbox", name="Search conversations")


def open_sidebar(page: Page) -> None:
    """On a phone the sidebar is a drawer: open it."""
    toggle = page.locator("[data-drawer]")
    if toggle.count() and toggle.is_visible():
        toggle.click()
        expect(page.locator("#sidebar")).to_have_css("transform", "none")  # slid in
    expect(search_box(page)).to_be_visible()


def test_typing_finds_message_text_and_shows_the_snippet(
    page: Page, live_server_url: str, login: Any
) -> None:
    first, *_ = conversations(login())
    page.goto(f"{live_server_url}/c/{first.pk}/")

    search_box(page).press_sequentially("danube ten", delay=20)

    results = page.locator("#conversation-results .search-results li")
    expect(results).to_have_count(1)
    expect(results.locator(".hit-title")).to_have_text("Rivers of Europe")
    expect(results.locator(".hit-snippet")).to_contain_text("The Danube flows through ten")
    expect(results.locator("mark")).to_have_text(["Danube", "ten"])
    expect(page.locator("#search-status")).to_have_text("1 conversation matches.")

    search_box(page).fill("zebra")
    expect(page.locator(".search-note")).to_have_text("No conversation matches “zebra”.")


def test_the_keyboard_reaches_the_search_and_the_results(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = conversations(login())
    page.goto(f"{live_server_url}/c/{made[0].pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10000)
    box = search_box(page)

    page.locator("#message").fill("half a thought")
    page.keyboard.press("Control+k")
    expect(box).to_be_focused()
    page.keyboard.type("report")
    expect(page.locator(".search-results li")).to_have_count(1)
    expect(page.locator("#message")).to_have_value("half a thought")

    box.press("ArrowDown")
    expect(page.locator(".search-results a").first).to_be_focused()
    page.keyboard.press("ArrowUp")
    expect(box).to_be_focused()

    page.keyboard.press("Meta+k")  # Cmd+K selects what the box says: typing replaces it
    page.keyboard.type("lisbon")
    expect(page.locator(".search-results li")).to_have_count(1)
    expect(box).to_have_value("lisbon")

    box.press("Escape")
    expect(box).to_have_value("")
    expect(page.get_by_role("heading", name="Today")).to_be_visible()
    expect(page.locator(".conversation-list li")).to_have_count(len(made))
    expect(page.locator(f"#conversation-link-{made[0].pk}")).to_have_attribute(
        "aria-current", "page"
    )

    box.press_sequentially("sourdough")
    expect(page.locator(".search-results li")).to_have_count(1)
    box.press("Enter")
    expect(page).to_have_url(re.compile(rf"/c/{made[2].pk}/$"))


def test_on_a_phone_ctrl_k_opens_the_drawer_at_the_search(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = conversations(login())
    page.set_viewport_size(VIEWPORTS["phone"])
    page.goto(f"{live_server_url}/c/{made[0].pk}/")
    expect(search_box(page)).to_be_hidden()

    page.keyboard.press("Control+k")

    expect(search_box(page)).to_be_focused()
    page.keyboard.type("castle")
    expect(page.locator(".search-results .hit-snippet")).to_contain_text("Start at the castle")
    page.keyboard.press("Escape")
    expect(search_box(page)).to_have_value("")
    expect(search_box(page)).to_be_visible()
    page.keyboard.press("Escape")
    expect(search_box(page)).to_be_hidden()


def test_the_list_is_grouped_by_date(page: Page, live_server_url: str, login: Any) -> None:
    made = conversations(login())
    page.goto(f"{live_server_url}/c/{made[0].pk}/")

    headings = page.locator("#conversation-results").get_by_role("heading")
    expect(headings).to_have_text(
        ["Today", "Yesterday", "Previous 7 days", "Previous 30 days", "Older"]
    )
    today = page.get_by_role("list", name="Today")
    expect(today.get_by_role("link")).to_have_text(["Trip to Lisbon", "Release checklist"])
    expect(page.get_by_role("list", name="Older").get_by_role("link")).to_have_text(
        "Old notes about <b>markup</b>"
    )


def test_screens_of_the_sidebar(page: Page, live_server_url: str, login: Any) -> None:
    made = conversations(login())
    page.goto(f"{live_server_url}/c/{made[0].pk}/")

    def grouped(page: Page) -> None:
        open_sidebar(page)
        expect(page.get_by_role("heading", name="Previous 30 days")).to_be_visible()

    def found(page: Page) -> None:
        open_sidebar(page)
        search_box(page).fill("the")
        expect(page.locator(".search-results li")).to_have_count(4)

    def nothing(page: Page) -> None:
        open_sidebar(page)
        search_box(page).fill("no such thing anywhere")
        expect(page.locator(".search-note")).to_be_visible()

    look(page, "sidebar-grouped", grouped)
    look(page, "sidebar-search", found)
    look(page, "sidebar-no-match", nothing)
