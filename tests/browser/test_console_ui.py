"""Every main page loads without a console error or a Content-Security-Policy violation: the
chat (a reply streamed, Details and Inspect open, the model picker and the shortcuts), its
settings, a run's inspector, the agents, the evaluations and a comparison, the admin's index,
lists, transcript, run and Usage, and the login page (its error line too). A violation is what
a strict CSP turns an inline style or script into: the page then silently lacks what it
blocked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import ConsoleMessage, Error, Page, expect

from chat import agents
from chat.models import CaseSet, Run, Visibility
from chat.testing import factories as make

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  console.error(`CSP violation: ${event.violatedDirective} blocked ${event.blockedURI || "inline"}`
    + ` at ${event.sourceFile}:${event.lineNumber}`);
});
"""


def listen(page: Page) -> list[str]:
    """What went wrong on the page from now on: console errors (CSP violations among them, as
    the browser and the listener above report them) and uncaught exceptions."""
    heard: list[str] = []

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            heard.append(f"{page.url}: {message.text}")

    def failed(error: Error) -> None:
        heard.append(f"{page.url}: uncaught {error}")

    page.on("console", console)
    page.on("pageerror", failed)
    page.add_init_script(REPORT_VIOLATIONS)
    return heard


def visit(page: Page, url: str, ready: Callable[[Page], None] | None = None) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    if ready is not None:
        ready(page)
        page.wait_for_load_state("networkidle")


def test_no_page_logs_an_error_or_a_csp_violation(
    page: Page, live_server_url: str, login: Any
) -> None:
    owner = login()
    owner.is_staff = owner.is_superuser = True
    owner.save()
    made = make.rich_conversation(owner)
    run = Run.objects.filter(conversation=made).order_by("pk").first()
    assert run is not None
    support = agents.create_agent(
        name="Support", conversation=made, user=owner, visibility=Visibility.TEAM
    )
    cases = CaseSet.objects.create(name="Support cases", created_by=owner)
    heard = listen(page)
    base = live_server_url

    def chat_ready(page: Page) -> None:
        page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)
        page.locator(".run-details > summary").first.click()
        page.locator(".inspect > summary").first.click()
        expect(page.locator(".inspector").first).to_be_visible(timeout=10_000)
        page.locator("[data-tool-pill]").first.click()
        expect(page.locator(".tool-detail").first).to_be_visible()

    def live_ready(page: Page) -> None:
        page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)
        page.locator("#message").fill("What time is it? Search the cards for pills too")
        page.locator("#message").press("Enter")
        expect(page.locator("#announce")).to_have_text("The reply is finished.", timeout=10_000)
        page.locator("[data-picker-toggle]").click()
        expect(page.locator(".picker-form")).to_be_visible()
        page.keyboard.press("Escape")
        page.locator(".topbar").get_by_role("button", name="Shortcuts").click()
        expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_visible()
        page.keyboard.press("Escape")

    visit(page, f"{base}/", live_ready)
    visit(page, f"{base}/c/{made.pk}/", chat_ready)
    visit(page, f"{base}/c/{made.pk}/settings/")
    visit(page, f"{base}/c/{made.pk}/runs/{run.pk}/")
    visit(page, f"{base}/agents/choose/")
    visit(page, f"{base}/agents/{support.slug}/versions/")
    visit(page, f"{base}/evals/")
    visit(page, f"{base}/evals/sets/{cases.pk}/")
    visit(page, f"{base}/evals/compare/?conversation={made.pk}")
    visit(page, f"{base}/admin/")
    visit(page, f"{base}/admin/chat/conversation/")
    visit(page, f"{base}/admin/chat/conversation/{made.pk}/change/")
    visit(page, f"{base}/admin/chat/run/{run.pk}/change/")
    for listed in ("run", "toolcall", "modelcall", "message", "annotation", "agent", "mcpserver"):
        visit(page, f"{base}/admin/chat/{listed}/")
    visit(page, f"{base}/admin/chat/mcpserver/add/")
    visit(page, f"{base}/admin/chat/usage/")
    page.context.clear_cookies()
    visit(page, f"{base}/login/")
    page.get_by_label("Username").fill(owner.username)
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_have_count(1)

    assert heard == []
