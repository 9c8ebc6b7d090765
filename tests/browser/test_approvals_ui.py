"""Tool calls that wait for a person, in the browser: the waiting card in both themes and on a
phone (the owner's and a reader's), decisions with the keyboard alone, an edit refused then
accepted, a second tab and the sidebar of another page following at once, the page title and
the notification of a page in the background. Screenshots, axe."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connections
from playwright.sync_api import Browser, Page, expect

from chat.models import Conversation, Run, ToolCall
from chat.testing import factories as make
from tests.browser.test_screens import SCREENS, look
from tests.browser.test_sharing_ui import page_of

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NOTE = "Leave a handoff note: the deploy moves to Friday noon, ask Sam before merging"
FAKE_NOTIFICATIONS = """
window.__notes = [];
window.__asked = 0;
class FakeNotification {
  constructor(title, options) { window.__notes.push({ title: title, body: options.body }); }
  close() {}
}
FakeNotification.permission = window.__permission || "granted";
FakeNotification.requestPermission = function () {
  window.__asked += 1;
  FakeNotification.permission = "granted";
  return Promise.resolve("granted");
};
window.Notification = FakeNotification;
Object.defineProperty(document, "hidden", { get: function () { return !!window.__hidden; } });
"""
"""A browser's notifications as a list the test reads, and a page it can put in the background."""


def handoff(owner: Any, title: str = "Friday deploy") -> Conversation:
    return make.conversation(owner, title, enabled_tools=["handoff_note"])


def waiting_turn(made: Conversation) -> None:
    """A turn whose handoff note waits, run in a thread of its own: the browser's event loop
    runs in this one."""

    def turn() -> None:
        try:
            make.run_turn(made, NOTE)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(turn).result()


def open_conversation(page: Page, base: str, made: Conversation) -> None:
    page.goto(f"{base}/c/{made.pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)


def ask(page: Page, text: str = NOTE) -> None:
    """Send a message with the keyboard; its handoff note waits."""
    page.locator("#message").fill(text)
    page.locator("#message").press("Enter")
    expect(page.locator(".waiting-call")).to_have_count(1, timeout=10_000)


def test_the_waiting_card_in_both_themes_on_a_phone_and_for_a_reader(
    page: Page, browser: Browser, live_server_url: str, login: Any
) -> None:
    owner = login()
    made = handoff(owner)
    made.shared = True
    made.save()
    waiting_turn(made)
    page.goto(f"{live_server_url}/c/{made.pk}/")

    def check(shown: Page) -> None:
        card = shown.locator(".waiting-calls")
        expect(card).to_contain_text("Waiting for your approval")
        expect(card.locator(".waiting-name")).to_have_text("Handoff note")
        expect(card).to_contain_text("handoff_note · built-in tool")
        expect(card.locator("pre")).to_contain_text('"note": "Leave a handoff note')
        for name in ("Approve", "Deny", "Always allow this tool in this conversation"):
            expect(shown.get_by_role("button", name=name, exact=True)).to_be_visible()
        expect(shown.get_by_text("Edit and approve")).to_be_visible()
        expect(shown.locator(".reply-footer .status")).to_have_text("Waiting for approval")
        expect(shown.locator("#stop")).to_be_visible()
        expect(shown).to_have_title("Waiting for approval · Friday deploy · Agent Lab")

    look(page, "waiting-card", check)

    page.get_by_text("Edit and approve").click()

    def editing(shown: Page) -> None:
        if not shown.locator(".waiting-edit").evaluate("el => el.open"):
            shown.get_by_text("Edit and approve").click()
        expect(shown.locator(".waiting-edit-form textarea")).to_be_visible()

    look(page, "waiting-card-edit", editing)

    bob = page_of(browser, live_server_url, "bob")
    bob.goto(f"{live_server_url}/c/{made.pk}/")

    def reading(shown: Page) -> None:
        expect(shown.locator(".waiting-calls")).to_contain_text("Waiting for approval")
        expect(shown.get_by_text("Waiting for the owner's decision.")).to_be_visible()
        expect(shown.get_by_role("button", name="Approve", exact=True)).to_be_hidden()
        expect(shown.locator(".waiting-calls pre")).to_contain_text("handoff note")

    look(bob, "waiting-card-reader", reading)
    bob.context.close()


def test_approve_and_deny_with_the_keyboard_alone(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = handoff(login())
    open_conversation(page, live_server_url, made)

    ask(page)

    call = page.locator(".waiting-call")
    expect(call).to_be_focused()  # the call that waits takes the focus, not a control
    page.keyboard.press("Tab")
    expect(call.locator("pre")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(".message.assistant .pill-completed")).to_have_count(1, timeout=10_000)
    expect(page.locator(".waiting-calls")).to_have_count(0)
    expect(page.locator("#message")).to_be_focused(timeout=10_000)
    expect(page).to_have_title("Friday deploy · Agent Lab")

    page.keyboard.type("Another handoff note, please")
    page.keyboard.press("Enter")
    expect(page.locator(".waiting-call")).to_be_focused(timeout=10_000)
    for _ in range(3):
        page.keyboard.press("Tab")
    reason = page.get_by_role("textbox", name="Reason for denying Handoff note")
    expect(reason).to_be_focused()
    page.keyboard.type("Sam decides that")
    page.keyboard.press("Escape")  # stops nothing: a waiting run ends by Stop alone
    page.keyboard.press("Enter")
    denied = page.locator(".message.assistant").last.locator(".pill-denied")
    expect(denied).to_have_text("Handoff note · denied", timeout=10_000)
    calls = ToolCall.objects.filter(run__conversation=made).order_by("pk")
    assert [(c.approval, c.decision_reason) for c in calls] == [
        ("approved", ""),
        ("denied", "Sam decides that"),
    ]


def test_an_edit_refused_keeps_its_text_then_an_edit_runs(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = handoff(login())
    open_conversation(page, live_server_url, made)
    ask(page)

    page.get_by_text("Edit and approve").click()
    box = page.get_by_role("textbox", name="Arguments to run Handoff note with, as a JSON object")
    expect(box).to_have_value(
        '{\n  "note": "Leave a handoff note: the deploy moves to Friday noon, ask Sam before '
        'merging"\n}'
    )
    box.fill('{"note": "Friday", "when": "noon"}')
    page.get_by_role("button", name="Approve with these arguments").click()

    error = page.locator(".waiting-error")
    expect(error).to_contain_text("do not fit the tool's schema: Additional properties")
    expect(box).to_have_value('{"note": "Friday", "when": "noon"}')
    expect(box).to_have_attribute("aria-invalid", "true")
    expect(box).to_be_focused()
    expect(page.locator("#notice")).to_contain_text("do not fit the tool's schema")
    SCREENS.mkdir(parents=True, exist_ok=True)
    box.evaluate("element => element.scrollIntoView({block: 'center'})")
    page.screenshot(path=SCREENS / "waiting-edit-refused-desktop-light.png")

    box.fill('{"note": "Friday noon", "recipient": "Sam"}')
    page.get_by_role("button", name="Approve with these arguments").click()

    expect(page.locator(".message.assistant .text")).to_contain_text(
        "recorded for Sam", timeout=10_000
    )
    call = ToolCall.objects.get(run__conversation=made)
    assert (call.approval, call.edited_arguments) == (
        "edited",
        '{"note": "Friday noon", "recipient": "Sam"}',
    )


def test_a_second_tab_and_another_pages_sidebar_follow_at_once(
    page: Page, live_server_url: str, login: Any
) -> None:
    owner = login()
    made = handoff(owner)
    quiet = make.conversation(owner, "Quiet one")
    second = page.context.new_page()
    elsewhere = page.context.new_page()
    open_conversation(page, live_server_url, made)
    open_conversation(second, live_server_url, made)
    open_conversation(elsewhere, live_server_url, quiet)
    mark = elsewhere.get_by_role("link", name="Waiting for your approval: Friday deploy")

    ask(page)

    expect(second.locator(".waiting-call")).to_have_count(1, timeout=10_000)
    expect(second).to_have_title("Waiting for approval · Friday deploy · Agent Lab")
    expect(mark).to_be_visible(timeout=10_000)
    second.get_by_role("button", name="Approve", exact=True).click()

    for tab in (page, second):
        expect(tab.locator(".message.assistant .pill-completed")).to_have_count(1, timeout=10_000)
        expect(tab.locator(".waiting-calls")).to_have_count(0)
        expect(tab).to_have_title("Friday deploy · Agent Lab")
    expect(mark).to_have_count(0)
    expect(elsewhere.get_by_role("link", name="Friday deploy", exact=True)).to_be_visible()
    run = Run.objects.get(conversation=made)
    for _ in range(50):  # the last frame may reach the page before the run's row is saved
        if run.status == "completed":
            break
        page.wait_for_timeout(100)
        run.refresh_from_db()
    assert run.status == "completed"


def test_stop_ends_a_waiting_run_and_send_says_why_not_meanwhile(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = handoff(login())
    open_conversation(page, live_server_url, made)
    ask(page)

    page.locator("#message").fill("Is it done?")
    page.locator("#message").press("Enter")
    expect(page.locator("#notice")).to_contain_text("waits for your decision")
    expect(page.locator("#message")).to_have_value("Is it done?")  # nothing typed is lost

    page.get_by_role("button", name="Stop").click()

    expect(page.locator(".waiting-calls")).to_have_count(0, timeout=10_000)
    expect(page.locator(".message.assistant .pill-cancelled")).to_have_count(1)
    expect(page.locator("#stop")).to_be_hidden()
    assert Run.objects.get(conversation=made).status == "cancelled"


def test_a_page_in_the_background_notifies_once_the_owner_allowed_it(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = handoff(login())
    watcher = page.context.new_page()
    watcher.add_init_script("window.__permission = 'default';" + FAKE_NOTIFICATIONS)
    open_conversation(watcher, live_server_url, made)
    open_conversation(page, live_server_url, made)

    ask(page)
    notify = watcher.get_by_role("button", name="Notify me when a call waits")
    expect(notify).to_be_visible(timeout=10_000)
    notify.click()  # asked on the owner's click only
    expect(notify).to_be_hidden()
    assert watcher.evaluate("window.__asked") == 1
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(watcher.locator(".pill-completed")).to_have_count(1, timeout=10_000)
    # The reply ends while the page is seen: no notice (one in the background says so).
    expect(watcher.locator("#run-state")).to_have_attribute("data-ended", "completed")

    watcher.evaluate("window.__hidden = true")
    assert watcher.evaluate("window.__notes") == []
    ask(page, "One more handoff note, for Sam")

    expect(watcher.locator(".waiting-call")).to_have_count(1, timeout=10_000)
    notes = watcher.evaluate("window.__notes")
    assert notes == [{"title": "Waiting for your approval", "body": "Handoff note · Friday deploy"}]
