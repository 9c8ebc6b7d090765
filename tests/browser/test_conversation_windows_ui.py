"""A long conversation in the browser, a window at a time: Show earlier messages comes in above
without moving what the reader sees, by mouse or keyboard; a link into an old message lands on
it, and a reply sent from there opens the latest; as a designer sees it."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from chat.models import Conversation
from tests.browser.test_screens import SCREENS, look
from tests.test_conversation_windows import long_conversation, question_from

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def top_of(page: Page, selector: str) -> float:
    box = page.locator(selector).bounding_box()
    assert box is not None
    return float(box["y"])


def first_turn_id(page: Page) -> str:
    return str(page.locator("#transcript > .turn").first.get_attribute("id"))


def show_earlier(page: Page, *, keyboard: bool = False) -> None:
    """Bring the window before in, as a reader does; what was on screen stays where it was."""
    button = page.get_by_role("button", name="Show earlier messages").first
    button.scroll_into_view_if_needed()
    turn = f"#{first_turn_id(page)}"
    before = top_of(page, turn)
    shown = page.locator(".message-anchor, .message.user").count()
    if keyboard:
        button.focus()
        page.keyboard.press("Enter")
    else:
        button.click()
    expect(page.locator(".message-anchor, .message.user")).not_to_have_count(shown)
    page.wait_for_timeout(100)  # any scroll correction has run
    assert abs(top_of(page, turn) - before) < 2, "the view jumped"


def test_show_earlier_messages_comes_in_place_by_mouse_and_keyboard(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = long_conversation(login(), 400)
    page.goto(f"{live_server_url}/c/{made.pk}/")
    expect(page.locator("#message-399")).to_be_in_viewport()  # it opens at the latest
    latest = page.locator("#transcript .turn").count()
    assert 0 < latest < 20

    show_earlier(page)
    expect(page.get_by_role("button", name="Show earlier messages")).to_be_focused()
    expect(page.get_by_role("status").filter(has_text="shown above")).to_be_attached()
    show_earlier(page, keyboard=True)
    expect(page.get_by_role("button", name="Show earlier messages")).to_be_focused()
    assert page.locator("#transcript .turn").count() > 2 * latest
    ids = page.locator("[id^=message-]").evaluate_all("els => els.map(e => +e.id.slice(8))")
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and ids[-1] == 399


def test_copy_regenerate_and_switch_a_turn_of_an_earlier_window(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = long_conversation(login(), 400)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server_url)
    page.goto(f"{live_server_url}/c/{made.pk}/")
    show_earlier(page)
    turn = page.locator("#transcript > .turn").first
    question = int(str(turn.locator(".message.user").get_attribute("id")).split("-")[1])
    answer = str(turn.locator(".text").inner_text()).strip()

    copy = turn.get_by_role("button", name="Copy message").last
    copy.click()
    expect(copy).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == answer

    turn.get_by_role("button", name="Regenerate reply").click()
    # The path now ends with that turn: the latest window holds it, where it was on screen.
    redone = page.locator(f"#message-{question}").locator("xpath=..")
    expect(redone.locator(".version-count")).to_contain_text("2 / 2", timeout=10_000)
    expect(page.locator(f"#message-{question}")).to_be_in_viewport()
    expect(page.locator("#transcript > .turn").last).to_have_id(str(redone.get_attribute("id")))

    redone.get_by_role("button", name="Previous version").click()
    # Back on the long path, the latest window does not hold it: the page opens the one that does.
    expect(page).to_have_url(f"{live_server_url}/c/{made.pk}/?at={question}#message-{question}")
    expect(page.locator(f"#message-{question}")).to_be_in_viewport()
    back = page.locator(f"#message-{question}").locator("xpath=..")
    expect(back.locator(".version-count")).to_contain_text("1 / 2")
    expect(back.locator(".text")).to_have_text(answer)


def test_a_link_into_an_old_message_lands_on_it_and_a_reply_from_there_opens_the_latest(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = long_conversation(login(), 400)
    at = question_from(made, 120) + 1
    page.goto(f"{live_server_url}/c/{made.pk}/?at={at}#message-{at}")

    expect(page.locator(f"#message-{at}")).to_be_in_viewport()
    expect(page).to_have_url(f"{live_server_url}/c/{made.pk}/?at={at}#message-{at}")
    expect(page.get_by_role("link", name="Show later messages")).to_be_attached()
    expect(page.get_by_role("link", name="Jump to latest")).to_be_attached()
    expect(page.locator(".live-elsewhere")).to_be_hidden()

    page.locator("#message").fill("And the time now?")
    page.locator("#message").press("Enter")
    expect(page).to_have_url(f"{live_server_url}/c/{made.pk}/")
    expect(page.locator("#transcript .turn").last).to_contain_text("And the time now?")
    expect(page.locator("#transcript .turn").last.locator(".message.assistant")).not_to_have_class(
        "streaming", timeout=10_000
    )


def test_a_reply_streaming_while_an_old_window_is_read(
    page: Page, live_server_url: str, login: Any
) -> None:
    """Another tab sends: this one keeps its window and says that the conversation goes on."""
    made = long_conversation(login(), 400)
    other = page.context.new_page()
    other.goto(f"{live_server_url}/c/{made.pk}/")
    page.goto(f"{live_server_url}/c/{made.pk}/?at=40#message-40")
    expect(page.locator("#message-40")).to_be_in_viewport()
    shown = page.locator("#transcript-window .turn").count()

    other.locator("#message").fill("What time is it?")
    other.locator("#message").press("Enter")

    note = page.locator(".live-elsewhere")
    expect(note).to_be_visible()
    expect(page.locator("#transcript-window .turn")).to_have_count(shown)
    expect(page.locator("#message-40")).to_be_in_viewport()
    page.screenshot(path=SCREENS / "conversation-windows-live-elsewhere.png")
    note.get_by_role("link", name="Jump to latest").click()
    expect(page.locator("#transcript .turn").last).to_contain_text("What time is it?")
    other.close()


def test_screens_of_a_long_conversation(page: Page, live_server_url: str, login: Any) -> None:
    made: Conversation = long_conversation(login(), 400)
    page.goto(f"{live_server_url}/c/{made.pk}/")

    def earlier(shown: Page) -> None:
        show_earlier(shown)
        shown.screenshot(path=SCREENS / "conversation-windows-earlier-viewport.png")

    look(page, "conversation-windows-latest", lambda shown: None)
    look(page, "conversation-windows-earlier", earlier)
    page.goto(f"{live_server_url}/c/{made.pk}/?at=200#message-200")
    expect(page.locator("#message-200")).to_be_in_viewport()
    look(
        page,
        "conversation-windows-old",
        lambda shown: shown.screenshot(path=SCREENS / "conversation-windows-old-viewport.png"),
    )


def test_the_admin_transcript_of_a_long_conversation(
    page: Page, live_server_url: str, login: Any
) -> None:
    root = login("root")
    root.is_staff = root.is_superuser = True
    root.save(update_fields=["is_staff", "is_superuser"])
    made = long_conversation(root, 400)
    at = question_from(made, 200) + 2
    page.goto(f"{live_server_url}/admin/chat/conversation/{made.pk}/change/?at={at}#message-{at}")

    expect(page.locator(f"#message-{at}")).to_be_in_viewport()  # the browser went to it
    page.screenshot(path=SCREENS / "admin-transcript-windows-viewport.png")

    def linked(shown: Page) -> None:
        expect(shown.get_by_role("link", name="Show earlier messages")).to_be_attached()
        expect(shown.get_by_role("link", name="Show later messages")).to_be_attached()
        expect(shown.get_by_role("link", name=f"#{at}", exact=True)).to_be_attached()

    look(page, "admin-transcript-windows", linked)
