"""Each tool's policy in the settings, in the browser: the agent version's choices preselected,
a whole server's tools each with its own, a tool always allowed here asked about again from
the keyboard, a looser choice refused in one line, a stricter one saved. Screenshots at
1440x900 and 390x844, light and dark, with axe.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from chat import agents, runs
from chat.models import Conversation, McpServer, McpTool
from chat.testing import factories as make
from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REFUSED = "Handoff note: the agent Careful@2 asks first; a conversation may only tighten that."


def from_careful(owner: Any) -> Conversation:
    """A conversation started from Careful@2: every built-in tool and the docs server's, Search
    cards asking first; Handoff note always allowed here."""
    server = McpServer.objects.create(
        name="docs", transport="http", url="http://127.0.0.1:9/mcp", status=McpServer.Status.UP
    )
    McpTool.objects.create(
        server=server,
        name="search_docs",
        exposed_name="docs__search_docs",
        description="Search the team docs.",
        annotations={"read_only_hint": True},
    )
    McpTool.objects.create(
        server=server,
        name="write_page",
        exposed_name="docs__write_page",
        description="Write a page of the team docs.",
    )
    tools = [*runs.default_parameters().enabled_tools, "docs__*"]
    settings = make.conversation(owner)
    settings.parameters = {"enabled_tools": tools}
    settings.save()
    careful = agents.create_agent(name="Careful", conversation=settings, user=owner)
    settings.parameters = {"enabled_tools": tools, "tool_policies": {"search_cards": "ask"}}
    settings.save()
    version = agents.new_version(agent=careful, conversation=settings, user=owner)
    made = agents.start_conversation(user=owner, version=version)
    made.title = "Release notes"
    made.always_allowed = ["handoff_note"]
    made.save()
    return made


def test_each_tool_has_its_policy_beside_it(page: Page, live_server_url: str, login: Any) -> None:
    made = from_careful(login())
    page.goto(f"{live_server_url}/c/{made.pk}/settings/")

    def policies(page: Page) -> None:
        expect(page.get_by_label("Policy for Search cards")).to_have_value("ask")
        expect(page.get_by_label("Policy for Handoff note")).to_have_value("ask")
        expect(page.get_by_label("Policy for Get current time")).to_have_value("run")
        docs = page.get_by_role("group", name="docs · MCP server")
        expect(docs.get_by_label("Policy for Search docs")).to_have_value("run")
        expect(docs.get_by_label("Policy for Write page")).to_have_value("ask")
        expect(docs).to_contain_text("Each tool below has its own policy.")
        expect(page.get_by_text("Started from the agent Careful@2")).to_be_visible()
        allowed = page.get_by_role("group", name="Always allowed in this conversation")
        expect(
            allowed.get_by_role("button", name="Ask again before Handoff note runs")
        ).to_be_visible()

    look(page, "tool-policies", policies)

    # Keyboard only: Ask again takes back the grant; the focus goes to that tool's policy.
    again = page.get_by_role("button", name="Ask again before Handoff note runs")
    again.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#settings-status")).to_contain_text(
        "Handoff note is no longer always allowed here"
    )
    expect(page.get_by_label("Policy for Handoff note")).to_be_focused()
    expect(page.get_by_role("group", name="Always allowed in this conversation")).to_have_count(0)
    made.refresh_from_db()
    assert made.always_allowed == []

    def refused(page: Page) -> None:
        page.get_by_label("Policy for Handoff note").select_option("run")
        page.get_by_role("button", name="Save settings").click()
        expect(page.get_by_role("alert").filter(has_text=REFUSED)).to_be_visible()
        expect(page.locator("#settings-status")).to_contain_text("Not saved")
        page.get_by_label("Policy for Handoff note").scroll_into_view_if_needed()

    look(page, "tool-policies-refused", refused)
    made.refresh_from_db()
    assert made.parameters["tool_policies"] == {"search_cards": "ask"}

    page.get_by_label("Policy for Handoff note").select_option("never")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#settings-status")).to_contain_text("Saved.")
    made.refresh_from_db()
    assert made.parameters["tool_policies"] == {"search_cards": "ask", "handoff_note": "never"}


def test_the_agent_page_shows_each_versions_policies(
    page: Page, live_server_url: str, login: Any
) -> None:
    from_careful(login())
    page.goto(f"{live_server_url}/agents/careful/versions/")

    def versions(page: Page) -> None:
        second = page.get_by_role("listitem").filter(
            has=page.get_by_role("heading", name="Careful v2")
        )
        tools = second.get_by_role("region", name="Tools and their policies")
        expect(tools).to_contain_text("Search cards Ask first")
        expect(tools).to_contain_text("Every tool of docs")
        expect(second).to_contain_text("Search cards: run without asking → ask first")

    look(page, "agent-tool-policies", versions)
