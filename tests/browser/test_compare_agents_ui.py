"""Comparing two versions of an agent on its suite in the browser: the Compare page opened for
the agent chooses its published and newest versions (no model to type beside them), and the
finished matrix marks the cases they decide differently. A strict local provider decides by the
system prompt it receives. Screenshots at 1440x900 and 390x844, light and dark, with axe."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from chat import agent, agents
from chat.models import Agent, AgentVersion, Case, CaseSet, ProviderProfile, Visibility
from chat.testing import factories as make
from chat.testing.openai_script import MODEL, ScriptedResponse, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

QUESTION = "search the cards for pills"
SEARCHING = "Search the cards before anything else."
TIMING = "Tell the time before anything else."
SEARCH = ("call_1", "search_cards", f'{{"query": "{QUESTION}"}}')
TIME = ("call_2", "get_current_time", '{"timezone": "UTC"}')
TOOLS = ["search_cards", "get_current_time"]


def by_prompt(body: Any) -> ScriptedResponse:
    """Asked the time, the clock; otherwise what the system prompt says first."""
    messages = body["messages"]
    if "What time is it" in str(messages[-1].get("content")):
        return tool_turn([TIME])
    prompts = [m.get("content") for m in messages if m["role"] == "system"]
    return tool_turn([SEARCH] if SEARCHING in prompts else [TIME])


def suite_of(owner: Any) -> CaseSet:
    """Three cases: the search the first version makes, the time the second one tells, and a
    question both answer with the clock."""
    suite = CaseSet.objects.create(name="Support suite", created_by=owner)
    tools = [definition.to_openai() for definition in agent.default_registry.definitions(TOOLS)]
    searched = {"name": "search_cards", "arguments": {"query": QUESTION}}
    chosen: list[tuple[str, str, dict[str, Any]]] = [
        ("Pills: search the cards", QUESTION, searched),
        ("Pills: the time first", QUESTION, {"name": "get_current_time"}),
        ("The time in Paris", "What time is it in Paris?", {"name": "get_current_time"}),
    ]
    for title, question, expected in chosen:
        Case.objects.create(
            case_set=suite,
            title=title,
            messages=[{"role": "user", "content": question}],
            tools=tools,
            expected={"tool_calls": [{"arguments": {}} | expected]},
            source="given",
            created_by=owner,
        )
    return suite


def support_of(owner: Any, server: FakeOpenAIServer) -> tuple[Agent, AgentVersion]:
    """Support, v1 published (searching first) and v2 (telling the time first), on its suite."""
    local = ProviderProfile.objects.create(
        name="Local",
        base_url=server.base_url,
        api_key_env="",
        model=MODEL,
        available_to_everyone=True,
    )

    def settings(prompt: str) -> Any:
        made = make.conversation(owner, system_prompts=[prompt], enabled_tools=TOOLS)
        made.profile = local
        made.save()
        return made

    support = agents.create_agent(
        name="Support", conversation=settings(SEARCHING), user=owner, visibility=Visibility.TEAM
    )
    draft = agents.new_version(
        agent=support, conversation=settings(TIMING), user=owner, note="The time first."
    )
    support.suite = suite_of(owner)
    support.save()
    return support, draft


def test_compare_two_versions_of_an_agent_on_its_suite(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer
) -> None:
    ada = login()
    fake_openai.responder = by_prompt
    support, draft = support_of(ada, fake_openai)

    page.goto(f"{live_server_url}/evals/compare/?agent={support.slug}")

    def form(shown: Page) -> None:
        expect(shown.get_by_label("Case set", exact=True)).to_have_value(str(support.suite_id))
        first = shown.get_by_label("Target 1", exact=True)
        expect(first).to_have_value(f"agent-{support.published_id}")
        expect(first.locator("option:checked")).to_have_text("Support v1 (published)")
        expect(shown.get_by_label("Target 2", exact=True)).to_have_value(f"agent-{draft.pk}")
        model = shown.get_by_label("Model of target 1", exact=False)
        expect(model).to_be_disabled()
        expect(model).to_have_attribute("placeholder", MODEL)
        expect(shown.get_by_label("Model of target 3", exact=False)).to_be_enabled()

    look(page, "compare-agents-form", form)

    # Back to an endpoint, the model field is there to type in again.
    page.get_by_label("Target 2", exact=True).select_option(value="default")
    expect(page.get_by_label("Model of target 2", exact=False)).to_be_enabled()
    page.get_by_label("Target 2", exact=True).select_option(label="Support v2")
    expect(page.get_by_label("Model of target 2", exact=False)).to_be_disabled()
    page.get_by_role("button", name="Compare", exact=True).click()

    expect(page).to_have_url(re.compile(r"/evals/compare/\d+/$"))
    expect(page.locator("#compare-progress")).to_contain_text(
        "2 of 3 cases decided differently", timeout=10_000
    )
    rows = page.locator(".matrix tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.filter(has_text="The time in Paris").locator(".differs-badge")).to_have_count(0)
    expect(page.locator(".matrix .cell-differs")).to_have_count(4)

    def matrix(shown: Page) -> None:
        head = shown.locator(".matrix thead")
        expect(head.get_by_role("link", name=f"Support v1 · {MODEL} (Local)")).to_be_visible()
        expect(head.get_by_role("link", name=f"Support v2 · {MODEL} (Local)")).to_be_visible()
        expect(shown.locator(".matrix .differs-badge").first).to_be_visible()
        expect(shown.locator(".eval-facts")).to_contain_text(
            f"Support v1 · {MODEL} (Local) vs Support v2 · {MODEL} (Local)"
        )

    look(page, "compare-agents-matrix", matrix)
