"""Saving cases from the chat, as an evaluator does: the reply that searched the cards is kept
as a case expecting what it did; the tool call, marked Bad with the call expected instead, is
kept as a case expecting that call."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from chat.models import Case
from chat.testing import evals as made_for
from chat.testing import factories as make
from tests.browser.test_screens import SCREENS, look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
APOS = "\N{RIGHT SINGLE QUOTATION MARK}"
FROM_ADA = f"Save as case, following ada{APOS}s mark"

STORED = 'What the reply did: search_cards({"query": "search the cards for pills"})'


def details(page: Page) -> Locator:
    """The reply's Details, opened."""
    reply = page.locator(".message.assistant").first
    summary = reply.locator(".run-details > summary")
    if reply.locator(".run-details[open]").count() == 0:
        summary.click()
    return reply.locator(".run-details")


def close_up(shown: Page, part: Locator, name: str) -> None:
    """A screenshot of one part, beside the page's: the sticky composer covers the end of a
    full-page one on a phone."""
    size = "phone" if (shown.viewport_size or {"width": 0})["width"] < 760 else "desktop"
    dark = shown.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
    sticky = "document.querySelectorAll('.topbar, .composer').forEach(e => e.style.visibility = %r)"
    shown.evaluate(sticky % "hidden")  # the sticky bars would cover a part taller than the window
    part.screenshot(path=SCREENS / f"{name}-{size}-{'dark' if dark else 'light'}.png")
    shown.evaluate(sticky % "")
    # A focused field keeps itself in view when the full-page screenshot resizes the window.
    shown.evaluate("document.activeElement && document.activeElement.blur()")


def open_tool(page: Page) -> Locator:
    page.locator("[data-tool-pill]").first.click()
    panel = page.locator(".tool-detail")
    expect(panel.locator(".annotate")).to_be_visible()
    return panel


def test_save_a_reply_and_an_annotated_tool_call_as_cases(
    page: Page, live_server_url: str, login: Any
) -> None:
    owner = login()
    made = make.new_conversation(owner, "Pills")
    page.goto(f"{live_server_url}/c/{made.pk}/")
    expect(page.locator('.chat[data-socket="open"]')).to_have_count(1)
    page.locator("#message").fill(made_for.QUESTION)
    page.locator("#message").press("Enter")
    reply = page.locator(".message.assistant").first
    expect(reply.get_by_role("button", name="Mark reply bad")).to_be_visible(timeout=10_000)

    # The reply, with the default expectation: what it did.
    area = details(page)
    opener = area.get_by_role("button", name="Save as case")
    opener.click()
    expect(opener).to_have_attribute("aria-expanded", "true")
    form = area.get_by_role("form", name="Save as case")
    expect(form.get_by_role("combobox", name="Case set")).to_be_focused()
    expect(form.get_by_role("combobox", name="Case set")).to_have_value("default")
    expect(form.get_by_role("textbox", name="Title")).to_have_value(made_for.QUESTION)
    expect(form.get_by_role("radio", name=STORED)).to_be_checked()
    expect(form.get_by_role("radio")).to_have_count(3)

    # Escape closes it and gives the focus back; the run goes on being finished.
    page.keyboard.press("Escape")
    expect(area.locator(".case-slot")).to_be_hidden()
    expect(opener).to_be_focused()
    expect(opener).to_have_attribute("aria-expanded", "false")

    opener.click()
    form = area.get_by_role("form", name="Save as case")
    form.get_by_role("button", name="Save case").click()
    line = area.locator(".case-saved")
    expect(line).to_have_text(re.compile(r"^Saved as case \d+ in “default”( · Open)?$"))
    saved = Case.objects.get()
    expect(line).to_contain_text(f"Saved as case {saved.pk} in")
    expect(page.locator("#announce")).to_have_text(f"Saved as case {saved.pk} in “default”.")
    expect(opener).to_be_focused()
    assert (saved.source, saved.expected, saved.at_message) == (
        "reply",
        {"tool_calls": [{"name": "search_cards", "arguments": {"query": made_for.QUESTION}}]},
        0,
    )

    # The tool call, marked Bad with get_current_time expected, saved from the annotation.
    panel = open_tool(page)
    panel.get_by_role("button", name="Mark tool call bad").click()
    expect(panel.get_by_role("button", name="Mark tool call bad")).to_have_attribute(
        "aria-pressed", "true"
    )
    panel.get_by_role("button", name="Note and expected call").click()
    panel.get_by_role("combobox", name="Tool").fill("get_current_time")
    panel.get_by_role("button", name="Save", exact=True).click()
    expect(panel.locator(".annotation-list")).to_contain_text("Expected: get_current_time {}")
    from_mark = panel.get_by_role("button", name=FROM_ADA)
    from_mark.click()
    form = panel.get_by_role("form", name="Save as case")
    expect(form.get_by_role("combobox", name="Case set")).to_be_focused()
    expect(form.get_by_role("radio", name=re.compile("^What the annotations say"))).to_be_checked()
    expect(form.get_by_role("combobox", name="Case set")).to_have_value("default")

    # A refusal keeps what was typed; then the annotation's call is saved in another set.
    arguments = form.get_by_role("textbox", name=re.compile("^Arguments"))
    arguments.fill('{"timezone": }')
    expect(form.get_by_role("radio", name="Another call")).to_be_checked()
    # A form that settles late does not take the focus from whoever is typing in it already.
    form.evaluate(
        """form => form.closest(".case-slot").dispatchEvent(new CustomEvent("htmx:afterSettle",
        {bubbles: true, detail: {target: form.closest(".case-slot")}}))"""
    )
    expect(arguments).to_be_focused()
    form.get_by_role("combobox", name="Tool").fill("get_current_time")
    form.get_by_role("button", name="Save case").click()
    expect(form.get_by_role("alert")).to_contain_text("Expected arguments are not valid JSON")
    expect(form.get_by_role("textbox", name=re.compile("^Arguments"))).to_have_value(
        '{"timezone": }'
    )
    expect(form.get_by_role("textbox", name=re.compile("^Arguments"))).to_be_focused()
    form.get_by_role("radio", name=re.compile("^What the annotations say")).check()
    form.get_by_role("combobox", name="Case set").fill("cards")
    form.get_by_role("button", name="Save case").click()
    expect(panel.locator(".case-saved")).to_contain_text("in “cards”")
    case = Case.objects.get(case_set__name="cards")
    assert (case.source, case.expected) == (
        "annotation",
        {"tool_calls": [{"name": "get_current_time", "arguments": {}}]},
    )

    def reply_form(shown: Page) -> None:
        area = details(shown)
        area.get_by_role("button", name="Save as case").click()
        form = area.get_by_role("form", name="Save as case")
        expect(form.get_by_role("combobox", name="Case set")).to_have_value("cards")
        expect(form.get_by_role("combobox", name="Case set")).to_be_focused()
        form.get_by_role("radio", name="Another call").check()
        form.get_by_role("combobox", name="Tool").fill("get_current_time")
        form.get_by_role("textbox", name=re.compile("^Arguments")).fill("[1, 2]")
        form.get_by_role("button", name="Save case").click()
        expect(form.get_by_role("alert")).to_contain_text("must be a JSON object")
        close_up(shown, form, "save-case-reply-form")

    look(page, "save-case-reply", reply_form)

    def call_form(shown: Page) -> None:
        panel = open_tool(shown)
        panel.get_by_role("button", name="Save as case", exact=True).click()
        form = panel.get_by_role("form", name="Save as case")
        expect(form.get_by_role("radio")).to_have_count(4)
        expect(form.get_by_role("radio", name=STORED)).to_be_checked()
        close_up(shown, panel, "save-case-call-panel")

    look(page, "save-case-call", call_form)

    def saved_line(shown: Page) -> None:
        panel = open_tool(shown)
        panel.get_by_role("button", name=FROM_ADA).click()
        panel.get_by_role("form", name="Save as case").get_by_role(
            "button", name="Save case"
        ).click()
        expect(panel.locator(".case-saved")).to_be_visible()
        close_up(shown, panel, "save-case-saved-panel")

    look(page, "save-case-saved", saved_line)
    assert Case.objects.filter(source="annotation").count() == 5
