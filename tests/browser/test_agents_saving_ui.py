"""Keeping a conversation's changed settings in the browser: the header says "changed from
Support v1", its changes page offers "Save as a new version" and "Save as a new agent", and once
saved the header names the new version. Screenshots at 1440x900 and 390x844, light and dark,
with axe."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe  # type: ignore[import-untyped]
from playwright.sync_api import Page, expect

from chat import agents
from chat.models import Agent, Conversation, Visibility
from chat.testing import factories as make
from tests.browser.test_screens import SCREENS, VIEWPORTS, look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def started_and_changed(owner: Any) -> Conversation:
    """Support v1 (owner's, the team's), and a conversation from it whose prompt and
    temperature changed since."""
    settings = make.conversation(
        owner, system_prompts=["You are the support agent."], enabled_tools=["get_current_time"]
    )
    support = agents.create_agent(
        name="Support",
        conversation=settings,
        user=owner,
        description="Answers questions about the time.",
        visibility=Visibility.TEAM,
    )
    made = agents.start_conversation(user=owner, version=support.published)
    made.title = "Refunds, politely"
    made.set_agent_parameters(
        made.agent_parameters().changed(
            system_prompts=("You are the support agent.\nAnswer in one sentence.",),
            temperature=0.3,
        )
    )
    made.save()
    return made


def answered(page: Page, name: str, check: Callable[[Page], None]) -> None:
    """As `look`, without reloading: the page answers a POST, and its message shows once."""
    for viewport, size in VIEWPORTS.items():
        for scheme in ("light", "dark"):
            page.set_viewport_size({"width": size["width"], "height": size["height"]})
            page.emulate_media(color_scheme=scheme)
            check(page)
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=SCREENS / f"{name}-{viewport}-{scheme}.png", full_page=True)
            violations = Axe().run(page).response["violations"]
            serious = [v for v in violations if v["impact"] in ("serious", "critical")]
            assert serious == [], (name, viewport, scheme, [v["id"] for v in serious])


def test_changed_settings_saved_as_a_new_version(
    page: Page, live_server_url: str, login: Any
) -> None:
    ada = login()
    made = started_and_changed(ada)
    page.goto(f"{live_server_url}/c/{made.pk}/")
    page.get_by_role("link", name="changed from Support v1").click()
    expect(page).to_have_url(re.compile(rf"/c/{made.pk}/changes/$"))

    def changes(shown: Page) -> None:
        expect(
            shown.get_by_role("heading", name="Changed from Support v1", level=1)
        ).to_be_visible()
        expect(shown.locator(".agent-diff-setting")).to_have_text(
            ["Temperature: provider default → 0.3"]
        )
        expect(
            shown.get_by_role("heading", name="Save as a new version of Support")
        ).to_be_visible()
        expect(shown.get_by_role("heading", name="Save as a new agent")).to_be_visible()
        expect(shown.get_by_role("button", name="Save as Support v2")).to_be_visible()
        expect(shown.get_by_role("button", name="Save as a new agent")).to_be_visible()

    look(page, "agents-saving-changes", changes)

    # A name that is taken: one line, and what was typed is still there.
    page.get_by_label("Name").fill("Support")
    page.get_by_label("Description").fill("Shorter answers for refunds.")
    page.get_by_label("The team").check()
    page.get_by_role("button", name="Save as a new agent").click()

    def refused(shown: Page) -> None:
        expect(shown.locator(".flash-error")).to_have_text(
            "An agent with this name already exists."
        )
        expect(shown.get_by_label("Description")).to_have_value("Shorter answers for refunds.")
        expect(shown.get_by_label("The team")).to_be_checked()

    answered(page, "agents-saving-refused", refused)
    assert Agent.objects.count() == 1

    page.get_by_label("What changed").fill("Answers in one sentence.")
    page.get_by_label("Publish it now").check()
    page.get_by_role("button", name="Save as Support v2").click()
    expect(page).to_have_url(re.compile(rf"/c/{made.pk}/$"))

    def saved(shown: Page) -> None:
        expect(shown.locator("#agent-label")).to_have_text("Support v2")
        expect(shown.get_by_text("Saved as Support v2.")).to_be_visible()

    answered(page, "agents-saving-saved", saved)
    made.refresh_from_db()
    support = Agent.objects.get(name="Support")
    assert made.agent_version == support.published and made.changed_from() is None
    assert support.published is not None and support.published.note == "Answers in one sentence."


def test_without_the_change_permission_only_a_new_agent_is_offered(
    page: Page, live_server_url: str, login: Any
) -> None:
    ada = login()
    bob = make.user("bob")
    support = started_and_changed(bob).agent_version
    assert support is not None
    made = agents.start_conversation(user=ada, version=support)
    made.set_agent_parameters(made.agent_parameters().changed(temperature=0.9))
    made.save()
    page.goto(f"{live_server_url}/c/{made.pk}/changes/")

    def changes(shown: Page) -> None:
        expect(shown.locator(".agent-save-refused")).to_contain_text(
            "Only this agent's owner, and people allowed to change the team's agents"
        )
        expect(shown.get_by_role("button", name=re.compile(r"^Save as Support"))).to_have_count(0)
        expect(shown.get_by_role("button", name="Save as a new agent")).to_be_visible()

    look(page, "agents-saving-not-yours", changes)

    page.get_by_label("Name").fill("Cool support")
    page.get_by_role("button", name="Save as a new agent").click()
    expect(page.locator("#agent-label")).to_have_text("Cool support v1")
    expect(page.get_by_text("Saved as a new agent, Cool support.")).to_be_visible()
