"""Chatting with an agent in the browser: choose a team agent, read what it can do in the empty
conversation, get a reply from its version, and open its versions from the header. Screenshots
at 1440x900 and 390x844, light and dark, with axe."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from chat import agents
from chat.models import Agent, Conversation, Visibility
from chat.testing import factories as make
from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DESCRIPTION = "Answers questions about the time and the cards, and leaves handoff notes."


def test_a_new_conversation_from_a_team_agent(page: Page, live_server_url: str, login: Any) -> None:
    ada = login()
    bob = make.user("bob")
    settings = make.conversation(
        bob, system_prompts=["You are the support agent."], enabled_tools=["get_current_time"]
    )
    support = agents.create_agent(
        name="Support",
        conversation=settings,
        user=bob,
        description=DESCRIPTION,
        visibility=Visibility.TEAM,
    )
    agents.create_agent(name="Bob's own", conversation=settings, user=bob)
    draft = make.conversation(
        bob,
        system_prompts=["You are the support agent.\nAnswer in one sentence."],
        enabled_tools=["get_current_time", "search_cards"],
        temperature=0.2,
    )
    agents.new_version(agent=support, conversation=draft, user=bob, note="Shorter answers.")

    page.goto(f"{live_server_url}/")
    page.get_by_role("link", name="Choose an agent").click()

    def choices(shown: Page) -> None:
        expect(shown.get_by_role("heading", name="New conversation", level=1)).to_be_visible()
        expect(shown.locator(".agent-card h2")).to_have_text(
            [re.compile(r"^Default"), re.compile(r"^Support v1")]
        )
        expect(shown.get_by_text(DESCRIPTION)).to_be_visible()

    look(page, "agents-choices", choices)

    page.get_by_role("button", name="Chat with Support").click()
    expect(page).to_have_url(re.compile(r"/c/\d+/$"))
    made = Conversation.objects.get(owner=ada)
    assert made.agent_version == Agent.objects.get(name="Support").published

    def empty(shown: Page) -> None:
        expect(shown.locator("#agent-label")).to_have_text("Support v1")
        expect(shown.locator("#empty-hint")).to_contain_text(DESCRIPTION)
        expect(shown.locator("#empty-hint")).to_contain_text("Tools: Get current time")

    look(page, "agents-empty", empty)

    page.fill("#message", "what time is it?")
    page.keyboard.press("Enter")
    expect(page.locator(".message.assistant .reply-footer")).to_be_visible(timeout=10_000)
    expect(page.locator(".message.assistant .pills .pill")).to_have_text(["Get current time"])

    def replied(shown: Page) -> None:
        expect(shown.locator("#agent-label")).to_have_text("Support v1")
        expect(shown.locator(".message.assistant .pills .pill")).to_have_text(["Get current time"])

    look(page, "agents-reply", replied)

    page.locator("#agent-label").click()
    expect(page).to_have_url(re.compile(r"/agents/support/versions/$"))

    def versions(shown: Page) -> None:
        expect(shown.get_by_role("heading", name="Support", level=1)).to_be_visible()
        expect(shown.locator(".agent-versions h3")).to_have_text(
            [re.compile(r"^Support v2"), re.compile(r"^Support v1 Published")]
        )
        expect(shown.get_by_text("Answer in one sentence.")).to_be_visible()

    look(page, "agents-versions", versions)

    made.refresh_from_db()
    made.set_agent_parameters(made.agent_parameters().model_copy(update={"temperature": 0.7}))
    made.save()
    page.goto(f"{live_server_url}/c/{made.pk}/")
    page.get_by_role("link", name="changed from Support v1").click()

    def changes(shown: Page) -> None:
        expect(shown.get_by_role("heading", name="Changed from Support v1")).to_be_visible()
        expect(shown.locator(".agent-diff-setting")).to_have_text(
            ["Temperature: provider default → 0.7"]
        )

    look(page, "agents-changes", changes)
