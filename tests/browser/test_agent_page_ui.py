"""An agent's page in the browser: three versions, what changed, the conversations that used
each, the team's marks and an evaluation, and the suite with its form. Screenshots at 1440x900
and 390x844, light and dark, with axe."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from chat import agents
from chat.models import (
    Agent,
    Annotation,
    Case,
    CaseSet,
    Conversation,
    EvalRun,
    Run,
    ToolCall,
    Visibility,
)
from chat.testing import factories as make
from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PROMPT = "You are the support agent."


def support_with_history(ada: Any) -> Agent:
    """Support v1 (published), v2 (shorter answers, search added) and v3 (warmer), with chats,
    marks on v2 and an evaluation of v2 on the suite."""
    first = make.conversation(ada, system_prompts=[PROMPT], enabled_tools=["get_current_time"])
    support = agents.create_agent(
        name="Support",
        conversation=first,
        user=ada,
        description="Answers questions about orders and leaves handoff notes.",
        visibility=Visibility.TEAM,
    )
    second = make.conversation(
        ada,
        system_prompts=[f"{PROMPT}\nAnswer in one sentence."],
        enabled_tools=["get_current_time", "search_cards"],
        temperature=0.2,
    )
    v2 = agents.new_version(agent=support, conversation=second, user=ada, note="Shorter answers.")
    third = make.conversation(
        ada,
        system_prompts=[f"{PROMPT}\nAnswer in one sentence."],
        enabled_tools=["get_current_time", "search_cards"],
        temperature=0.7,
    )
    agents.new_version(agent=support, conversation=third, user=ada, note="Warmer tone.")
    Conversation.objects.filter(pk__in=[first.pk, second.pk, third.pk]).update(agent_version=None)

    bob = make.user("bob")
    where = Conversation.objects.create(owner=ada, agent_version=v2, title="Where is my order?")
    Conversation.objects.create(owner=bob, agent_version=v2, title="Refund", shared=True)
    Conversation.objects.create(owner=bob, agent_version=v2, title="Bob's private chat")
    run = Run.objects.create(conversation=where, status="completed")
    call = ToolCall.objects.create(run=run, call_id="c1", name="search_cards")
    Annotation.objects.create(author=ada, run=run, verdict="good")
    Annotation.objects.create(author=bob, run=run, verdict="good")
    Annotation.objects.create(author=ada, run=run, tool_call=call, verdict="bad")

    suite = CaseSet.objects.create(name="Support cases")
    for title in ("Order status", "Refund policy", "Handoff"):
        Case.objects.create(case_set=suite, title=title, messages=[], expected={"no_tool": True})
    Agent.objects.filter(pk=support.pk).update(suite=suite, require_suite_pass=True)
    EvalRun.objects.create(
        agent_version=v2,
        case_set=suite,
        set_name=suite.name,
        label="Support v2",
        status="completed",
        total=3,
        passed=2,
        failed=1,
    )
    return support


def test_an_agent_page_with_versions_marks_and_an_evaluation(
    page: Page, live_server_url: str, login: Any
) -> None:
    support = support_with_history(login())
    support.refresh_from_db()
    page.goto(f"{live_server_url}/agents/{support.slug}/versions/")

    def shown(page: Page) -> None:
        expect(page.get_by_role("heading", name="Support", level=1)).to_be_visible()
        expect(page.locator(".agent-versions h3")).to_have_text(
            [re.compile(r"^Support v3"), re.compile(r"^Support v2"), re.compile(r"^Support v1")]
        )
        two = page.locator("#version-2")
        expect(two.locator("#version-2-conversations")).to_contain_text("3 conversations, 2 shown")
        expect(two.get_by_role("link", name="Where is my order?")).to_be_visible()
        expect(two.locator("#version-2-marks")).to_contain_text("Good 2 · Bad 1")
        expect(two.get_by_role("link", name="Support cases")).to_be_visible()
        expect(two.locator("#version-2-evaluations")).to_contain_text("2 passed, 1 failed")
        expect(two.get_by_text("Tools added:")).to_be_visible()
        expect(page.locator("#suite")).to_contain_text("(3 cases)")
        suite = page.get_by_role("combobox", name="Suite")
        expect(suite).to_have_value(str(support.suite_id))

    look(page, "agent-page", shown)

    page.get_by_role("checkbox", name=re.compile("New versions must pass")).uncheck()
    page.get_by_role("button", name="Save suite").click()
    expect(page.locator(".flash")).to_contain_text(
        "Support is evaluated on “Support cases”: new versions are published whatever they pass."
    )
    support.refresh_from_db()
    assert support.require_suite_pass is False
