"""Annotating in the chat, as a team does: the owner marks a reply Bad with a note and its tool
call Bad with the call they expected; after a reload both are there, and a teammate reading the
shared conversation sees them and adds their own."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from chat.models import Annotation
from chat.testing import factories as make
from tests.browser.test_screens import VIEWPORTS, look
from tests.browser.test_sharing_ui import page_of

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

EXPECTED = '{"note": "Call Sam about the release"}'


def open_tool(page: Page) -> None:
    """Open the reply's first tool pill and wait for its details."""
    page.locator("[data-tool-pill]").first.click()
    expect(page.locator(".tool-detail .annotate")).to_be_visible()


def ask_the_time(page: Page, url: str) -> Locator:
    """Ask the conversation at `url` the time: its reply, once it can be judged."""
    page.goto(url)
    expect(page.locator('.chat[data-socket="open"]')).to_have_count(1)
    page.locator("#message").fill("What time is it?")
    page.locator("#message").press("Enter")
    reply = page.locator(".message.assistant").first
    expect(reply.get_by_role("button", name="Mark reply bad")).to_be_visible(timeout=10_000)
    return reply


def test_mark_a_reply_and_a_tool_call_then_a_teammate_reads_them(
    page: Page, browser: Browser, live_server_url: str, login: Any
) -> None:
    owner = login()
    made = make.new_conversation(owner, "Release checklist")
    reply = ask_the_time(page, f"{live_server_url}/c/{made.pk}/")

    # The reply: a note, then Bad.
    reply.get_by_role("button", name="Note", exact=True).click()
    note = reply.get_by_role("textbox", name=re.compile(r"^Note"))
    expect(note).to_be_focused()
    note.fill("It should say which time zone.")
    reply.get_by_role("button", name="Mark reply bad").click()
    expect(reply.get_by_role("button", name="Mark reply bad")).to_have_attribute(
        "aria-pressed", "true"
    )
    expect(reply.get_by_role("button", name="Mark reply bad")).to_be_focused()
    expect(reply.locator(".annotate-summary")).to_have_text(re.compile(r"Bad 1$"))
    expect(reply.locator(".annotation-list")).to_contain_text("It should say which time zone.")
    expect(page.locator("#announce")).to_have_text("You marked this reply bad.")

    # The tool call: Bad, then the expected call; bad JSON is refused and kept.
    open_tool(page)
    panel = page.locator(".tool-detail")
    panel.get_by_role("button", name="Mark tool call bad").click()
    expect(panel.get_by_role("button", name="Mark tool call bad")).to_have_attribute(
        "aria-pressed", "true"
    )
    expect(page.locator(".call-mark-bad")).to_have_count(1)
    panel.get_by_role("button", name="Note and expected call").click()
    panel.get_by_role("combobox", name="Tool").fill("handoff_note")
    arguments = panel.get_by_role("textbox", name=re.compile(r"^Arguments"))
    arguments.fill('{"note": "Call Sam",}')
    panel.get_by_role("button", name="Save", exact=True).click()
    expect(panel.get_by_role("alert")).to_have_text(
        re.compile(r"^Expected arguments are not valid JSON: .* line 1, column 21\.$")
    )
    expect(panel.get_by_role("textbox", name=re.compile(r"^Arguments"))).to_have_value(
        '{"note": "Call Sam",}'
    )
    panel.get_by_role("textbox", name=re.compile(r"^Arguments")).fill(EXPECTED)
    panel.get_by_role("button", name="Save", exact=True).click()
    expect(panel.get_by_role("alert")).to_have_count(0)
    expect(panel.locator(".annotation-list")).to_contain_text(
        'Expected: handoff_note {"note": "Call Sam about the release"}'
    )
    expect(panel.get_by_role("button", name="Note and expected call")).to_be_focused()
    saved = Annotation.objects.get(tool_call__isnull=False)
    assert (saved.verdict, saved.expected) == (
        "bad",
        {"tool": "handoff_note", "arguments": {"note": "Call Sam about the release"}},
    )

    # After a reload both are there.
    page.reload()
    reply = page.locator(".message.assistant").first
    expect(reply.get_by_role("button", name="Mark reply bad")).to_have_attribute(
        "aria-pressed", "true"
    )
    expect(reply.locator(".annotation-list")).to_contain_text("It should say which time zone.")
    expect(page.locator(".pills .call-mark-bad")).to_contain_text("marked bad")
    open_tool(page)
    expect(page.locator(".tool-detail .annotation-list")).to_contain_text("handoff_note")

    def check(shown: Page) -> None:
        expect(shown.locator(".annotate-summary").first).to_be_visible()
        open_tool(shown)

    look(page, "annotations", check)

    def refused(shown: Page) -> None:
        open_tool(shown)
        panel = shown.locator(".tool-detail")
        panel.get_by_role("button", name="Note and expected call").click()
        panel.get_by_role("textbox", name=re.compile(r"^Arguments")).fill("[1, 2]")
        panel.get_by_role("button", name="Save", exact=True).click()
        expect(panel.get_by_role("alert")).to_contain_text("must be a JSON object")

    look(page, "annotation-refused", refused)
    assert Annotation.objects.get(tool_call__isnull=False).expected == saved.expected

    # A teammate on the shared conversation sees them, and adds a mark of their own.
    page.set_viewport_size(VIEWPORTS["desktop"])
    page.get_by_text("Rename, share or delete").click()
    page.get_by_role("button", name="Share with the team").click()
    bob = page_of(browser, live_server_url, "bob")
    bob.goto(f"{live_server_url}/c/{made.pk}/")
    reply = bob.locator(".message.assistant").first
    expect(reply.locator(".annotation-list")).to_contain_text("It should say which time zone.")
    expect(reply.get_by_role("button", name="Mark reply bad")).to_have_attribute(
        "aria-pressed", "false"
    )
    expect(bob.locator(".pills .call-mark-bad")).to_have_count(1)
    reply.get_by_role("button", name="Mark reply good").click()
    expect(reply.locator(".annotate-summary")).to_have_text(re.compile(r"Good 1 · Bad 1$"))
    open_tool(bob)
    expect(bob.locator(".tool-detail .annotation-list")).to_contain_text("ada")

    def teammate(shown: Page) -> None:
        expect(shown.locator(".read-only-note")).to_be_visible()
        open_tool(shown)

    look(bob, "annotations-shared", teammate)
    assert sorted(Annotation.objects.values_list("author__username", "verdict")) == [
        ("ada", "bad"),
        ("ada", "bad"),
        ("bob", "good"),
    ]
    bob.context.close()


def test_save_on_its_own_keeps_a_note_and_an_expected_call_means_bad(
    page: Page, live_server_url: str, login: Any
) -> None:
    """No Good or Bad first: Save keeps a note as a note, and an expected call that differs
    from the call is Bad; malformed arguments are the one line, the text typed kept."""
    owner = login()
    made = make.new_conversation(owner, "Tokyo time")
    reply = ask_the_time(page, f"{live_server_url}/c/{made.pk}/")

    reply.get_by_role("button", name="Note", exact=True).click()
    expect(reply.get_by_text("(Save keeps it, marked or not)")).to_be_visible()
    reply.get_by_role("textbox", name=re.compile(r"^Note")).fill("Which zone? Ask first.")
    reply.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator("#announce")).to_have_text("Your note on this reply is saved.")
    expect(reply.locator(".annotation-list")).to_contain_text("Which zone? Ask first.")
    expect(reply.locator(".annotate-reply .annotation-verdict")).to_have_text("Note")
    for name in ("Mark reply good", "Mark reply bad"):
        expect(reply.get_by_role("button", name=name)).to_have_attribute("aria-pressed", "false")

    open_tool(page)
    panel = page.locator(".tool-detail")
    panel.get_by_role("button", name="Note and expected call").click()
    panel.get_by_role("combobox", name="Tool").fill("get_current_time")
    typed = '{"timezone": "Asia/Tokyo"'
    panel.get_by_role("textbox", name=re.compile(r"^Arguments")).fill(typed)
    panel.get_by_role("button", name="Save", exact=True).click()
    alert = panel.get_by_role("alert")
    expect(alert).to_have_text(re.compile(r"^Expected arguments are not valid JSON: .*\.$"))
    expect(alert).not_to_contain_text("Good or Bad")
    expect(panel.get_by_role("textbox", name=re.compile(r"^Arguments"))).to_have_value(typed)
    assert not Annotation.objects.filter(tool_call__isnull=False).exists()

    panel.get_by_role("textbox", name=re.compile(r"^Arguments")).fill(typed + "}")
    panel.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator("#announce")).to_have_text("You marked this tool call bad.")
    expect(panel.get_by_role("button", name="Mark tool call bad")).to_have_attribute(
        "aria-pressed", "true"
    )
    expect(page.locator(".pills .call-mark-bad")).to_have_count(1)
    saved = Annotation.objects.get(tool_call__isnull=False)
    assert (saved.verdict, saved.expected) == (
        "bad",
        {"tool": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}},
    )

    def check(shown: Page) -> None:
        answer = shown.locator(".message.assistant").first
        expect(answer.locator(".annotate-reply .annotation-verdict")).to_have_text("Note")
        open_tool(shown)
        shown.locator(".tool-detail").get_by_role("button", name="Note and expected call").click()
        expect(shown.locator(".tool-detail .annotate-hint")).to_be_visible()

    look(page, "annotations-save-alone", check)
