"""Tests of chat.tool_choices and the settings panel's tools: built-in tools, then each MCP server
as a group; a single MCP tool or a whole server is chosen and saved; an unknown name is refused;
a chosen tool of a server that is down, or that its server no longer lists, stays chosen."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from chat import agent
from chat.agent import mcp
from chat.models import Conversation, McpServer
from chat.runs.mcp import save_tools
from chat.settings_panel import AgentSettings
from chat.testing import factories as make
from chat.tool_choices import NOT_HERE, NOT_LISTED, SERVER_DOWN, ToolGroup, tool_choices

pytestmark = pytest.mark.django_db

DOCS_TOOLS = [
    mcp.ServerTool("search_docs", "Search the team docs.", {"type": "object"}),
    mcp.ServerTool("slow", "Wait, then answer.", {"type": "object"}),
]


def docs(tools: list[mcp.ServerTool] = DOCS_TOOLS, **fields: Any) -> McpServer:
    server = McpServer.objects.create(name="docs", transport="http", url="http://docs/mcp")
    save_tools(server.pk, tools)
    McpServer.objects.filter(pk=server.pk).update(**fields)
    server.refresh_from_db()
    return server


def chosen(*tools: str) -> Conversation:
    made = make.conversation(make.user(), "tools")
    made.parameters = {"enabled_tools": list(tools)}
    made.save()
    return made


def panel_of(conversation: Conversation, *tools: str) -> AgentSettings:
    data = make.settings_form(**{"agent-enabled_tools": list(tools)})
    return AgentSettings(conversation, data, user=conversation.owner)


def labels(groups: list[ToolGroup]) -> dict[str, str]:
    return {choice.name: choice.label for group in groups for choice in group.choices}


def test_built_in_tools_then_each_server_as_a_group() -> None:
    docs()

    groups = tool_choices(())

    assert [group.legend for group in groups] == ["Built-in tools", "docs · MCP server"]
    assert [choice.name for choice in groups[0].choices] == agent.default_registry.built_in_names()
    server = groups[1]
    assert (server.state, server.status) == ("up", "Up.")
    assert [(c.name, c.label) for c in server.choices] == [
        ("docs__*", "All tools of docs"),
        ("docs__search_docs", "Search docs"),
        ("docs__slow", "Slow"),
    ]
    assert server.choices[1].description == "Search the team docs."


def test_tools_an_mcp_server_registered_for_a_run_are_not_built_in() -> None:
    registry = agent.ToolRegistry()
    registry.register(agent.ToolDefinition(name="mine", description="Mine."), lambda _: "")
    registry.register(
        agent.ToolDefinition(name="docs__slow", description="Slow."), lambda _: "", source="docs"
    )
    docs()

    groups = tool_choices(["docs__slow"], registry)

    assert [choice.name for choice in groups[0].choices] == ["mine"]
    assert "docs__slow" in [choice.name for choice in groups[1].choices]


def test_a_single_mcp_tool_and_a_whole_server_are_chosen_and_saved() -> None:
    """AgentParameters refuses names its registry lacks unless they are known MCP tools."""
    docs()
    conversation = chosen()

    panel = panel_of(conversation, "handoff_note", "docs__search_docs")
    assert panel.is_valid(), (panel.form.errors, panel.non_field_errors)
    panel.save()
    conversation.refresh_from_db()
    assert conversation.parameters["enabled_tools"] == ["handoff_note", "docs__search_docs"]

    panel = panel_of(conversation, "docs__*")
    assert panel.is_valid(), (panel.form.errors, panel.non_field_errors)
    panel.save()
    conversation.refresh_from_db()
    assert conversation.parameters["enabled_tools"] == ["docs__*"]


def test_an_unknown_name_is_refused_with_one_clear_line() -> None:
    docs()
    conversation = chosen("handoff_note")

    panel = panel_of(conversation, "docs__search_docs", "docs__never_was")

    assert not panel.is_valid()
    assert panel.form.errors["enabled_tools"] == [
        "Select a valid choice. docs__never_was is not one of the available choices."
    ]
    conversation.refresh_from_db()
    assert conversation.parameters["enabled_tools"] == ["handoff_note"]


def test_a_chosen_tool_of_a_server_that_is_down_stays_chosen_and_labelled() -> None:
    docs(status=McpServer.Status.DOWN, error="ConnectError: connection refused")
    conversation = chosen("docs__slow", "docs__*")

    panel = AgentSettings(conversation, user=conversation.owner)

    group = panel.tool_groups[1]
    assert (group.state, group.status) == ("down", "Down: ConnectError: connection refused")
    assert labels(panel.tool_groups)["docs__slow"] == f"Slow ({SERVER_DOWN})"
    assert labels(panel.tool_groups)["docs__*"] == f"All tools of docs ({SERVER_DOWN})"
    assert panel.form.initial["enabled_tools"] == ["docs__slow", "docs__*"]
    kept = panel_of(conversation, "docs__slow", "docs__*")
    assert kept.is_valid(), kept.form.errors
    kept.save()
    conversation.refresh_from_db()
    assert conversation.parameters["enabled_tools"] == ["docs__slow", "docs__*"]


def test_a_tool_the_server_no_longer_lists_stays_chosen_and_comes_back() -> None:
    server = docs()
    save_tools(server.pk, DOCS_TOOLS[:1])  # `slow` disappeared
    conversation = chosen("docs__slow")

    panel = AgentSettings(conversation, user=conversation.owner)
    assert labels(panel.tool_groups)["docs__slow"] == f"Slow ({NOT_LISTED})"
    assert labels(panel.tool_groups)["docs__search_docs"] == "Search docs"
    assert panel_of(conversation, "docs__slow").is_valid()

    save_tools(server.pk, DOCS_TOOLS)  # and came back
    panel = AgentSettings(conversation, user=conversation.owner)
    assert labels(panel.tool_groups)["docs__slow"] == "Slow"


def test_a_server_turned_off_shows_only_when_something_of_it_is_chosen() -> None:
    docs(enabled=False)
    assert [group.legend for group in tool_choices(["handoff_note"])] == ["Built-in tools"]

    groups = tool_choices(["docs__search_docs"])

    assert groups[1].state == "off"
    assert labels(groups)["docs__search_docs"].endswith("(not available: server turned off)")


def test_a_chosen_name_nothing_knows_is_kept_as_not_available_here() -> None:
    groups = tool_choices(["handoff_note", "module_tool"])
    assert labels(groups)["module_tool"] == f"Module tool ({NOT_HERE})"


def test_the_page_groups_the_tools_in_labelled_fieldsets(client_in: Client, user: Any) -> None:
    docs(status=McpServer.Status.DOWN, error="gone")
    conversation = make.conversation(user, "tools", enabled_tools=["get_current_time"])
    conversation.parameters = {"enabled_tools": ["docs__slow"]}
    conversation.save()

    page = client_in.get(reverse("chat:conversation_settings", args=[conversation.pk])).text

    assert "<legend>docs · MCP server</legend>" in page
    assert '<p class="tool-group-status">Down: gone</p>' in page
    assert 'value="docs__*"' in page and "All tools of docs (not available: server down)" in page
    slow = page.split('value="docs__slow"', 1)[1].split("</li>", 1)[0]
    assert " checked>" in slow and "Slow (not available: server down)</label>" in slow
    assert "<code>docs__slow</code> · Wait, then answer." in slow
