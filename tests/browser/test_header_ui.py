"""The conversation header as a team uses it: the owner shares and copies the link, a teammate
continues in a copy of their own, anyone who reads downloads; a run or an evaluation that ends
while the tab is in the background says so in the title and a notification. Screenshots at
1440x900 and 390x844 (touch), light and dark, with axe."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from playwright.sync_api import Browser, Page, expect

from chat.models import Conversation
from chat.testing import factories as make
from chat.testing.openai_script import MODEL, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.browser.test_compare_agents_ui import by_prompt, support_of
from tests.browser.test_evals_ui import SEARCH, cases_of, provider
from tests.browser.test_screens import SCREENS, look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SPY_NOTIFICATIONS = """
window.__notes = [];
(function () {
  var Real = window.Notification;
  function Spy(title, options) {
    window.__notes.push({ title: title, body: options.body, tag: options.tag });
    return new Real(title, options);
  }
  Object.defineProperty(Spy, "permission", { get: function () { return Real.permission; } });
  Spy.requestPermission = function () { return Real.requestPermission(); };
  window.Notification = Spy;
})();
window.__hidden = false;
Object.defineProperty(document, "hidden", { get: function () { return window.__hidden; } });
Object.defineProperty(document, "visibilityState", {
  get: function () { return window.__hidden ? "hidden" : "visible"; }
});
"""
"""The browser's own notifications (permission granted in the context), each also kept in a
list the test reads; and a page the test puts in the background and brings back."""

NOT_ASKED_YET = (
    SPY_NOTIFICATIONS
    + """
window.__asked = 0;
window.Notification = function (title, options) {
  window.__notes.push({ title: title, body: options.body, tag: options.tag });
};
window.Notification.permission = "default";
window.Notification.requestPermission = function () {
  window.__asked += 1;
  window.Notification.permission = "granted";
  return Promise.resolve("granted");
};
"""
)
"""A browser that has not asked for the permission yet, and grants it when asked."""

RUN_STATE = (
    "(() => {{ const state = document.getElementById('run-state');"
    " state.dataset.running = '{running}'; state.dataset.ended = '{ended}';"
    " document.dispatchEvent(new Event('htmx:wsAfterMessage')); }})()"
)
"""The run state as a frame swaps it in, and the event the socket's frames fire."""

HIDE = "window.__hidden = true; document.dispatchEvent(new Event('visibilitychange'))"
SHOW = "window.__hidden = false; document.dispatchEvent(new Event('visibilitychange'))"


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    """A touch screen: every control works with a tap, none needs a hover."""
    return {**browser_context_args, "has_touch": True}


def page_of(browser: Browser, base: str, username: str) -> Page:
    """A second person, in a browser of their own."""
    user = get_user_model().objects.create_user(username, password="pw-123456789")
    client = Client()
    client.force_login(user)
    context = browser.new_context(has_touch=True)
    context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": base}]
    )
    return context.new_page()


def answered(page: Page, base: str, owner: Any, title: str = "Release checklist") -> Conversation:
    made = make.new_conversation(owner, title)
    page.goto(f"{base}/c/{made.pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)
    page.locator("#message").fill("What time is it?")
    page.locator("#message").press("Enter")
    expect(page.locator(".message.assistant .reply-footer")).to_be_visible(timeout=10_000)
    return made


def test_the_owner_shares_copies_the_link_and_downloads(
    page: Page, live_server_url: str, login: Any
) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server_url)
    made = answered(page, live_server_url, login())
    address = f"{live_server_url}/c/{made.pk}/"

    share = page.locator(".share-menu > summary")
    expect(share).to_have_text("Share")
    share.click()
    expect(page.get_by_text("Only you can open it until you share it.")).to_be_visible()
    page.locator(".share-menu").get_by_role("button", name="Share with the team").click()
    expect(page.locator(".flash")).to_contain_text("Shared with the team")
    expect(share).to_have_text("Shared with the team")

    share.click()
    expect(page.get_by_label("Link to this conversation")).to_have_value(address)
    page.get_by_role("button", name="Copy link").click()
    expect(page.locator("[data-copy-status]")).to_have_text("Link copied.")
    assert page.evaluate("navigator.clipboard.readText()") == address
    page.keyboard.press("Escape")
    expect(page.locator(".share-menu")).not_to_have_attribute("open", "")
    expect(share).to_be_focused()

    def share_open(shown: Page) -> None:
        shown.locator(".share-menu > summary").click()
        expect(shown.get_by_role("button", name="Stop sharing")).to_be_visible()
        expect(shown.get_by_role("button", name="Copy link")).to_be_visible()

    look(page, "header-owner-share", share_open)

    def download_open(shown: Page) -> None:
        shown.locator(".share-menu > summary").tap()
        shown.locator(".download-menu > summary").tap()  # one menu open at a time
        expect(shown.get_by_role("link", name=re.compile(r"^Markdown"))).to_be_visible()
        expect(shown.locator(".share-menu")).not_to_have_attribute("open", "")

    look(page, "header-download", download_open)

    with page.expect_download() as started:
        page.get_by_role("link", name=re.compile(r"^Markdown")).click()
    download = started.value
    assert download.suggested_filename == f"release-checklist-{made.pk}.md"
    text = Path(download.path()).read_text(encoding="utf-8")
    assert text.startswith("# Release checklist\n")
    assert "### User · #0" in text and "**Tool call: Get current time**" in text
    page.locator(".download-menu > summary").click()
    with page.expect_download() as started:
        page.get_by_role("link", name=re.compile(r"^JSON \(full\)")).click()
    assert started.value.suggested_filename == f"release-checklist-{made.pk}.full.json"


def test_copy_link_without_the_clipboard_api_selects_the_address(
    page: Page, live_server_url: str, login: Any
) -> None:
    page.add_init_script(
        "delete Navigator.prototype.clipboard; document.execCommand = () => false;"
    )
    made = answered(page, live_server_url, login())
    page.locator(".share-menu > summary").click()
    page.get_by_role("button", name="Copy link").click()
    status = page.locator("[data-copy-status]")
    expect(status).to_have_text("The link is selected: copy it with Ctrl+C or ⌘C.")
    field = page.get_by_label("Link to this conversation")
    expect(field).to_be_focused()
    selected = page.evaluate(
        "(() => { const f = document.getElementById('share-url');"
        " return f.value.slice(f.selectionStart, f.selectionEnd); })()"
    )
    assert selected == f"{live_server_url}/c/{made.pk}/"


def test_a_teammate_continues_in_a_copy_of_their_own(
    page: Page, browser: Browser, live_server_url: str, login: Any
) -> None:
    made = answered(page, live_server_url, login())
    Conversation.objects.filter(pk=made.pk).update(shared=True)

    bob = page_of(browser, live_server_url, "bob")
    bob.goto(f"{live_server_url}/c/{made.pk}/")
    expect(bob.locator(".share-menu > summary")).to_have_text("Shared by ada")

    def reader(shown: Page) -> None:
        shown.locator(".share-menu > summary").click()
        expect(shown.get_by_text("ada shares this conversation with the team")).to_be_visible()
        expect(shown.get_by_role("button", name="Continue in my own copy")).to_be_visible()
        expect(shown.get_by_role("button", name="Stop sharing")).to_have_count(0)

    look(bob, "header-reader", reader)

    bob.get_by_role("button", name="Continue in my own copy").click()
    copy = Conversation.objects.get(parent=made)
    expect(bob).to_have_url(f"{live_server_url}/c/{copy.pk}/")
    expect(bob.locator(".flash")).to_contain_text("This is your own copy of “Release checklist”")
    expect(bob.locator(".fork-links")).to_contain_text(
        "Copied from Release checklist, shared by ada"
    )
    expect(bob.locator("#message")).to_be_editable()
    expect(bob.locator(".share-menu > summary")).to_have_text("Share")
    assert (copy.owner.get_username(), copy.forked_at) == ("bob", 3)
    bob.context.close()


def test_a_reply_that_ends_in_a_hidden_tab_says_so_in_the_title_and_a_notification(
    page: Page, live_server_url: str, login: Any
) -> None:
    page.context.grant_permissions(["notifications"], origin=live_server_url)
    page.add_init_script(SPY_NOTIFICATIONS)
    made = make.new_conversation(login(), "Friday deploy")
    page.goto(f"{live_server_url}/c/{made.pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)
    expect(page).to_have_title("Friday deploy · Agent Lab")

    page.evaluate(HIDE)
    page.locator("#message").fill("What time is it?")
    page.locator("#message").press("Enter")
    expect(page).to_have_title("Reply ready · Friday deploy · Agent Lab", timeout=10_000)
    notes = page.evaluate("window.__notes")
    assert notes == [
        {"title": "Reply ready", "body": "Friday deploy", "tag": f"agentlab-run-{made.pk}"}
    ]
    page.evaluate(SHOW)
    expect(page).to_have_title("Friday deploy · Agent Lab")

    # A reply that ends while the page is seen changes nothing.
    page.locator("#message").fill("And in Tokyo?")
    page.locator("#message").press("Enter")
    expect(page.locator(".message.assistant .reply-footer")).to_have_count(2, timeout=10_000)
    expect(page).to_have_title("Friday deploy · Agent Lab")
    assert len(page.evaluate("window.__notes")) == 1


def test_a_failed_run_and_the_one_offer_of_notifications(
    page: Page, live_server_url: str, login: Any
) -> None:
    """The page learns how a run ended from the run state its frames carry: here one that says
    the run failed, as the socket sends it. The browser has not been asked yet."""
    page.add_init_script(NOT_ASKED_YET)
    made = make.new_conversation(login(), "Nightly import")
    page.goto(f"{live_server_url}/c/{made.pk}/")
    offer = page.get_by_role("button", name=re.compile(r"^Notify me when the reply is ready"))
    expect(offer).to_be_hidden()  # nothing runs: nothing to be told about
    page.evaluate(RUN_STATE.format(running="true", ended=""))
    expect(offer).to_be_visible()
    page.screenshot(path=SCREENS / "notify-offer-desktop-light.png")
    offer.click()
    expect(offer).to_be_hidden()
    expect(page.locator("#announce")).to_have_text(
        "You will be notified while this page is in the background."
    )
    assert page.evaluate("window.__asked") == 1

    page.evaluate(HIDE)
    page.evaluate(RUN_STATE.format(running="false", ended="failed"))
    expect(page).to_have_title("Run failed · Nightly import · Agent Lab")
    assert page.evaluate("window.__notes") == [
        {"title": "Run failed", "body": "Nightly import", "tag": f"agentlab-run-{made.pk}"}
    ]
    page.evaluate(SHOW)
    expect(page).to_have_title("Nightly import · Agent Lab")


def test_an_evaluation_that_ends_in_a_hidden_tab_says_so(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer
) -> None:
    page.context.grant_permissions(["notifications"], origin=live_server_url)
    page.add_init_script(SPY_NOTIFICATIONS)
    owner = login()
    cases_of("pills", owner)
    provider("Slow provider", fake_openai)
    fake_openai.enqueue(*(tool_turn([SEARCH]).but(delay=1.0) for _ in range(2)))

    page.goto(f"{live_server_url}/evals/")
    page.get_by_label("Case set", exact=True).select_option(label="pills")
    page.get_by_label("Target", exact=True).select_option(label=f"Slow provider · {MODEL}")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/evals/runs/\d+/$"))
    page.evaluate(HIDE)
    expect(page).to_have_title(
        re.compile(r"^Evaluation finished · Evaluation #\d+ · pills · Agent Lab$"), timeout=15_000
    )
    notes = page.evaluate("window.__notes")
    assert [note["title"] for note in notes] == ["Evaluation finished"]
    assert notes[0]["body"].startswith("pills · evaluation #")
    page.evaluate(SHOW)
    expect(page).to_have_title(re.compile(r"^Evaluation #\d+ · pills · Agent Lab$"))


def test_a_comparison_that_ends_in_a_hidden_tab_says_so(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer
) -> None:
    page.context.grant_permissions(["notifications"], origin=live_server_url)
    page.add_init_script(SPY_NOTIFICATIONS)
    support, _ = support_of(login(), fake_openai)
    fake_openai.responder = lambda body: by_prompt(body).but(delay=0.5)

    page.goto(f"{live_server_url}/evals/compare/?agent={support.slug}")
    page.get_by_role("button", name="Compare", exact=True).click()
    expect(page).to_have_url(re.compile(r"/evals/compare/\d+/$"))
    page.evaluate(HIDE)
    expect(page).to_have_title(re.compile(r"^Comparison finished · "), timeout=30_000)
    notes = page.evaluate("window.__notes")
    assert [note["title"] for note in notes] == ["Comparison finished"]
    assert notes[0]["body"].startswith("Comparison #")
    page.evaluate(SHOW)
    expect(page).not_to_have_title(re.compile(r"^Comparison finished"))
