"""The conversation list of a team's daily use, in a browser: a line's menu (pin, archive,
delete with Undo) by mouse, by touch and by keyboard, the page's one menu put under the line
asked for (and, without script, the same actions on a conversation's page), the Pinned group,
the archived list, news marks that come live and go when the conversation is opened, and a
new conversation that comes into the list with its first message; as a designer sees them
(screenshots, axe)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from chat.models import Conversation, Message, Run, RunStatus
from chat.testing import factories as make
from tests.browser.conftest import wait_for
from tests.browser.test_screens import look
from tests.browser.test_sidebar_scroll_ui import TOPICS, open_sidebar
from tests.test_sidebar_pages import noon

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    """A touch screen: every control of a line works with a tap, none needs a hover."""
    return {**browser_context_args, "has_touch": True}


def history(owner: Any) -> list[Conversation]:
    """Eight conversations with a message each, a few minutes apart today, most recent first."""
    rows = []
    for title in TOPICS:
        row = Conversation.objects.create(owner=owner, title=title)
        Message.objects.create(conversation=row, index=0, role="user", content=title)
        rows.append(row)
    for n, row in enumerate(rows):
        Conversation.objects.filter(pk=row.pk).update(updated_at=noon() - timedelta(minutes=n))
    return rows


def menu(page: Page, row: Conversation) -> Any:
    """Open the menu of a line of the list (the script's "⋯" button): its items."""
    line = page.locator(f"#conversation-link-{row.pk}").locator("xpath=..")
    button = line.locator(":scope > .line-button")
    expect(button).to_have_accessible_name(f"Actions: {row.title}")
    if button.get_attribute("aria-expanded") != "true":
        button.click()
    actions = line.get_by_role("menu", name=f"Actions: {row.title}")
    expect(actions).to_be_visible()
    expect(button).to_have_attribute("aria-expanded", "true")
    return actions


def archived_menu(page: Page, row: Conversation) -> Any:
    """Open an archived line's own menu (it works without script): its buttons."""
    line = page.locator(f"#conversation-link-{row.pk}").locator("xpath=..")
    summary = line.locator("details.line-menu > summary")
    expect(summary).to_have_accessible_name(f"Actions: {row.title}")
    if not line.locator("details.line-menu").evaluate("menu => menu.open"):
        summary.click()
    actions = line.locator(".line-actions")
    expect(actions).to_be_visible()
    return actions


def test_a_daily_list_with_pins_news_and_a_waiting_mark(
    page: Page, live_server_url: str, login: Any
) -> None:
    owner = login()
    rows = history(owner)
    now = timezone.now()
    Conversation.objects.filter(pk__in=[rows[3].pk, rows[6].pk]).update(pinned_at=now)
    Conversation.objects.filter(pk=rows[2].pk).update(seen_at=now - timedelta(hours=1))
    Run.objects.create(conversation=rows[2], status=RunStatus.COMPLETED, finished_at=now)
    Run.objects.create(conversation=rows[4], status=RunStatus.REQUIRES_ACTION)
    page.goto(f"{live_server_url}/c/{rows[0].pk}/")

    def check(page: Page) -> None:
        open_sidebar(page)
        pinned = page.get_by_role("list", name="Pinned").get_by_role("link")
        expect(pinned).to_have_text([rows[6].title, rows[3].title])  # same pin moment: by id
        expect(page.get_by_role("link", name=f"New reply: {rows[2].title}")).to_be_visible()
        menu(page, rows[1])

    look(page, "list-pins-news", check)


def test_pin_then_archive_from_the_menu_then_unarchive(
    page: Page, live_server_url: str, login: Any
) -> None:
    rows = history(login())
    page.goto(f"{live_server_url}/c/{rows[0].pk}/")
    open_sidebar(page)

    expect(menu(page, rows[5]).get_by_role("menuitem")).to_have_text(["Pin", "Archive", "Delete"])
    menu(page, rows[5]).get_by_role("menuitem", name="Pin").click()

    pinned = page.get_by_role("list", name="Pinned")
    expect(pinned.get_by_role("link")).to_have_text([rows[5].title])
    expect(page.locator("#list-toast")).to_have_text(f"Pinned “{rows[5].title}”.")
    expect(page.locator(f"#conversation-link-{rows[5].pk}")).to_be_focused()
    expect(page.get_by_role("list", name="Today").get_by_role("link")).to_have_count(7)

    pinned_menu = menu(page, rows[5])
    expect(pinned_menu.get_by_role("menuitem")).to_have_text(["Unpin", "Archive", "Delete"])
    pinned_menu.get_by_role("menuitem", name="Archive").click()

    expect(page.get_by_role("heading", name="Pinned")).to_have_count(0)
    expect(page.locator(f"#conversation-link-{rows[5].pk}")).to_have_count(0)
    page.get_by_role("link", name="Archived conversations").click()
    archived = page.locator("#archived-list")
    expect(archived.get_by_role("link")).to_have_text([rows[5].title])
    look(page, "list-archived", lambda page: archived_menu(page, rows[5]))

    archived_menu(page, rows[5]).get_by_role("button", name="Unarchive").click()

    expect(archived.get_by_role("link")).to_have_count(0)
    open_sidebar(page)
    expect(page.locator(f"#conversation-link-{rows[5].pk}")).to_be_visible()
    row = Conversation.objects.get(pk=rows[5].pk)
    assert (row.pinned_at, row.archived_at) == (None, None)


def test_a_delete_waits_for_its_undo_window(page: Page, live_server_url: str, login: Any) -> None:
    rows = history(login())
    page.goto(f"{live_server_url}/c/{rows[0].pk}/")
    open_sidebar(page)
    line = page.locator(f"#conversation-link-{rows[1].pk}")

    menu(page, rows[1]).get_by_role("menuitem", name="Delete").click()

    expect(line).to_be_hidden()
    toast = page.locator("#list-toast")
    expect(toast).to_have_text(f"Deleted “{rows[1].title}” · Undo")
    expect(toast.get_by_role("button", name="Undo")).to_be_focused()
    page.wait_for_timeout(1000)
    assert Conversation.objects.filter(pk=rows[1].pk).exists()
    toast.get_by_role("button", name="Undo").click()
    expect(line).to_be_visible()
    expect(line).to_be_focused()

    menu(page, rows[1]).get_by_role("menuitem", name="Delete").click()

    wait_for(lambda: not Conversation.objects.filter(pk=rows[1].pk).exists(), timeout=12)
    expect(line).to_have_count(0)
    # Leaving the page ends the window too: the delete goes with the page.
    menu(page, rows[2]).get_by_role("menuitem", name="Delete").click()
    page.goto(f"{live_server_url}/c/{rows[0].pk}/")
    wait_for(lambda: not Conversation.objects.filter(pk=rows[2].pk).exists())


def test_the_undo_line_as_a_designer_sees_it(page: Page, live_server_url: str, login: Any) -> None:
    rows = history(login())
    page.goto(f"{live_server_url}/c/{rows[0].pk}/")

    def check(page: Page) -> None:
        open_sidebar(page)
        second = page.locator("#conversation-results li:has(> .line-button)").nth(1)
        second.locator(".line-button").tap()
        second.get_by_role("menuitem", name="Delete").tap()
        expect(page.locator("#list-toast").get_by_role("button", name="Undo")).to_be_visible()

    look(page, "list-undo", check)


def test_news_comes_live_and_goes_when_the_conversation_is_in_front_of_its_owner(
    page: Page, live_server_url: str, login: Any
) -> None:
    owner = login()
    rows = history(owner)
    asked = make.new_conversation(owner, "Time in Tokyo")
    other = page.context.new_page()
    other.goto(f"{live_server_url}/c/{rows[0].pk}/")
    page.goto(f"{live_server_url}/c/{asked.pk}/")
    for each in (page, other):
        each.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)

    page.locator("#message").fill("What time is it in Asia/Tokyo?")
    page.locator("#message").press("Enter")

    expect(page.locator(".message.assistant .reply-footer")).to_be_visible(timeout=10_000)
    marked = other.get_by_role("link", name="New reply: Time in Tokyo")
    expect(marked).to_be_visible(timeout=10_000)
    # The page that shows it said it was seen: the next page drawn has no mark.
    run = Run.objects.get(conversation=asked)
    wait_for(lambda: Conversation.objects.get(pk=asked.pk).seen_at > run.finished_at)
    expect(page.locator(f"#conversation-link-{asked.pk} .news-mark")).to_have_count(0)
    other.reload()
    expect(other.get_by_role("link", name="Time in Tokyo", exact=True)).to_be_visible()
    other.close()


def test_a_new_conversation_comes_into_the_list_with_its_first_message(
    page: Page, live_server_url: str, login: Any
) -> None:
    history(login())
    page.goto(live_server_url)
    open_sidebar(page)
    page.get_by_role("button", name="New conversation").click()
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)
    new = Conversation.objects.latest("pk")
    expect(page.locator(f"#conversation-link-{new.pk}")).to_be_hidden()  # only for live titles

    page.locator("#message").fill("Plan a picnic")
    page.locator("#message").press("Enter")

    line = page.locator(f"#conversation-link-{new.pk}")
    expect(line).to_have_text("Plan a picnic", timeout=10_000)
    expect(line).to_be_visible()
    expect(line).to_have_attribute("aria-current", "page")


def test_without_script_a_conversations_page_pins_and_archives_it_and_the_archived_list_deletes(
    browser: Browser, page: Page, live_server_url: str, login: Any
) -> None:
    rows = history(login())
    context = browser.new_context(java_script_enabled=False)
    context.add_cookies(page.context.cookies())
    plain = context.new_page()
    plain.goto(f"{live_server_url}/c/{rows[3].pk}/")
    expect(plain.locator(".line-button")).to_have_count(0)
    expect(plain.locator("#line-menu")).to_be_hidden()

    plain.get_by_text("Rename, share or delete").click()
    plain.get_by_role("button", name="Pin on top").click()

    expect(plain.locator(".flash")).to_contain_text(f"Pinned “{rows[3].title}”.")
    expect(plain.get_by_role("list", name="Pinned").get_by_role("link")).to_have_text(
        [rows[3].title]
    )
    plain.get_by_text("Rename, share or delete").click()
    plain.get_by_role("button", name="Archive").click()
    expect(plain.locator(".flash")).to_contain_text(f"Archived “{rows[3].title}”")
    expect(plain.locator(f"#conversation-link-{rows[3].pk}")).to_have_count(0)
    plain.get_by_role("link", name="Archived conversations").click()
    archived_menu(plain, rows[3]).get_by_role("button", name="Delete").click()
    expect(plain.get_by_role("heading", level=1)).to_have_text(f"Delete “{rows[3].title}”?")
    plain.get_by_role("button", name="Delete conversation").click()
    expect(plain.locator(".flash")).to_contain_text(f"Deleted “{rows[3].title}”.")
    assert not Conversation.objects.filter(pk=rows[3].pk).exists()
    context.close()


def test_the_menu_by_keyboard_one_at_a_time(page: Page, live_server_url: str, login: Any) -> None:
    rows = history(login())
    page.goto(f"{live_server_url}/c/{rows[0].pk}/")
    open_sidebar(page)
    button = page.get_by_role("button", name=f"Actions: {rows[1].title}")

    button.focus()
    page.keyboard.press("Enter")

    shown = page.get_by_role("menu", name=f"Actions: {rows[1].title}")
    expect(shown.get_by_role("menuitem", name="Pin")).to_be_focused()
    page.keyboard.press("ArrowDown")
    expect(shown.get_by_role("menuitem", name="Archive")).to_be_focused()
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")
    expect(shown.get_by_role("menuitem", name="Delete")).to_be_focused()
    page.keyboard.press("Escape")
    expect(shown).to_be_hidden()
    expect(button).to_be_focused()
    expect(button).to_have_attribute("aria-expanded", "false")
    # One open at a time; a tap elsewhere closes it.
    menu(page, rows[1])
    other = menu(page, rows[6])  # a line the first menu does not cover
    expect(button).to_have_attribute("aria-expanded", "false")
    expect(page.get_by_role("menu")).to_have_count(1)
    page.locator(".chat").tap()
    expect(other).to_be_hidden()
    # A page more of lines brought by htmx gets its buttons too.
    made = [Conversation.objects.create(owner=rows[0].owner, title=f"Old {n}") for n in range(60)]
    page.reload()
    open_sidebar(page)
    page.get_by_role("link", name="Show more conversations").scroll_into_view_if_needed()
    expect(page.get_by_role("button", name=f"Actions: {made[0].title}")).to_have_count(1)


LAST_SHOWN = """() => {
  const box = document.getElementById("conversation-results").getBoundingClientRect();
  const lines = [...document.querySelectorAll("#conversation-results li:has(> .line-button)")];
  return lines.filter(line => line.getBoundingClientRect().bottom <= box.bottom).length - 1;
}"""
"""The place of the last line the list's box shows whole, before it scrolls."""


def test_a_menu_low_in_a_long_list_opens_where_it_can_be_seen(
    page: Page, live_server_url: str, login: Any
) -> None:
    owner = login()
    rows = [
        Conversation.objects.create(owner=owner, title=f"{TOPICS[n % len(TOPICS)]} {n}")
        for n in range(40)
    ]
    rows.reverse()  # most recent first
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server_url}/c/{rows[0].pk}/")
    low = page.evaluate(LAST_SHOWN)
    assert 5 < low < 35  # the list scrolls in its box
    target = rows[low]

    delete = menu(page, target).get_by_role("menuitem", name="Delete")

    expect(delete).to_be_in_viewport()
    last = menu(page, rows[-1]).get_by_role("menuitem", name="Delete")
    expect(last).to_be_in_viewport()
