"""Tool policies on agent versions (chat/agents/policies.py): a version made from a conversation
carries them, the agent page lists each version's tools with theirs, a difference names a
policy that changed, and `agents export`/`import` carry them."""

from __future__ import annotations

import re
from html import unescape
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from chat import agents
from chat.agents import ValueChange, records
from chat.agents.policies import ToolPolicy, known, tool_policies
from chat.agents.texts import difference_lines, difference_summary
from chat.models import Agent, AgentVersion, McpServer, McpTool, Visibility

from .test_versions import chosen, with_settings

pytestmark = pytest.mark.django_db

TOOLS = ["get_current_time", "handoff_note", "docs__*"]


def docs_server() -> None:
    server = McpServer.objects.create(name="docs", transport="http", url="http://127.0.0.1:9/mcp")
    McpTool.objects.create(
        server=server,
        name="search",
        exposed_name="docs__search",
        annotations={"read_only_hint": True},
    )
    McpTool.objects.create(server=server, name="write", exposed_name="docs__write")


def careful(owner: Any) -> tuple[Agent, AgentVersion]:
    """Careful v1 with every default; v2, made from a conversation that lets Handoff note run
    without asking and never runs the docs server's write tool."""
    docs_server()
    made = chosen(owner, TOOLS)
    agent = agents.create_agent(
        name="Careful", conversation=made, user=owner, visibility=Visibility.TEAM
    )
    made.parameters = {
        **made.parameters,
        "tool_policies": {"handoff_note": "run", "docs__write": "never"},
    }
    made.save()
    return agent, agents.new_version(agent=agent, conversation=made, user=owner, note="Trusted.")


def test_a_version_made_from_a_conversation_carries_its_policies(user: Any) -> None:
    agent, second = careful(user)
    assert second.parameters["tool_policies"] == {"handoff_note": "run", "docs__write": "never"}
    assert agent.published.agent_parameters().tool_policies == {}  # type: ignore[union-attr]
    # A conversation started from it starts with them; a changed policy alone is a change.
    started = agents.start_conversation(user=user, version=second)
    assert started.agent_parameters().tool_policies == second.agent_parameters().tool_policies
    assert started.changed_from() is None
    with_settings(started, tool_policies={"handoff_note": "run"})
    assert started.changed_from() == second
    third = agents.new_version(agent=agent, conversation=started, user=user)
    assert third.parameters["tool_policies"] == {"handoff_note": "run"}


def test_a_difference_names_each_policy_that_changed(user: Any) -> None:
    agent, second = careful(user)
    first = agent.published
    assert first is not None

    change = agents.difference(first, second)

    assert change.policies == (
        ValueChange("Handoff note", "ask first", "run without asking"),
        ValueChange("Write", "ask first", "never run"),
    )
    assert not change.empty
    assert change.summary() == [
        "Handoff note: ask first → run without asking",
        "Write: ask first → never run",
    ]
    lines = list(difference_lines(change, "Careful v1", "Careful v2"))
    assert "Handoff note: ask first → run without asking" in lines
    assert difference_summary(change, "Careful v1", "Careful v2")["policies"][0] == {
        "label": "Handoff note",
        "before": "ask first",
        "after": "run without asking",
    }
    # Back again, and a choice equal to the default is no change at all.
    assert agents.difference(second, first).policies[0] == ValueChange(
        "Handoff note", "run without asking", "ask first"
    )
    same = AgentVersion.objects.create(
        agent=agent,
        number=3,
        parameters={"enabled_tools": TOOLS, "tool_policies": {"handoff_note": "ask"}},
    )
    assert agents.difference(first, same).empty


def test_agents_diff_says_the_policy_changes(user: Any) -> None:
    careful(user)
    out = StringIO()
    call_command("agents", "diff", "Careful@1", "Careful@2", stdout=out)
    assert "Handoff note: ask first → run without asking" in out.getvalue().splitlines()


def test_each_versions_tools_with_their_policies(user: Any) -> None:
    _, second = careful(user)
    parameters = [second.agent_parameters()]
    assert tool_policies(parameters[0], known(parameters)) == (
        ToolPolicy("get_current_time", "run"),
        ToolPolicy("handoff_note", "run", is_default=False),
        ToolPolicy(
            "docs__*",
            None,
            tools=(
                ToolPolicy("docs__search", "run"),
                ToolPolicy("docs__write", "never", is_default=False),
            ),
        ),
    )


def test_the_agent_page_shows_each_versions_tools_with_their_policies(
    client_in: Client, user: Any
) -> None:
    careful(user)
    response = client_in.get(reverse("chat:agent_detail", args=["careful"]))
    html = unescape(re.sub(r"\s+", " ", response.content.decode()))
    second = html[html.index('id="version-2"') : html.index('id="version-1"')]
    first = html[html.index('id="version-1"') :]
    tools = re.compile(r'title="([\w*]+)">([^<]+)</span> <span class="policy policy-\w+">([^<]+)')
    assert [(name, title, policy.strip()) for name, title, policy in tools.findall(second)] == [
        ("get_current_time", "Get current time", "Run without asking"),
        ("handoff_note", "Handoff note", "Run without asking"),
        ("docs__search", "Search", "Run without asking"),
        ("docs__write", "Write", "Never run"),
    ]
    assert "Every tool of docs" in second
    assert [name for name, *_ in tools.findall(first)] == [
        "get_current_time",
        "handoff_note",
        "docs__search",
        "docs__write",
    ]
    assert 'Ask first <span class="policy-default">(default)</span>' in first
    assert (
        "<strong>Handoff note:</strong> <del>ask first</del> → <ins>run without asking</ins>"
        in (second)
    )


def test_export_and_import_carry_the_policies(user: Any) -> None:
    agent, second = careful(user)
    text = records.export_text(agent)
    Agent.objects.filter(pk=agent.pk).update(name="Careful old", slug="careful-old")

    imported = records.store(records.read(text), user=user).agent

    copy = imported.versions.get(number=2)
    assert copy.parameters["tool_policies"] == {"handoff_note": "run", "docs__write": "never"}
    assert agents.difference(second, copy).empty
    assert imported.versions.get(number=1).agent_parameters().tool_policies == {}


def test_an_import_with_a_made_up_policy_is_refused(user: Any) -> None:
    agent, _ = careful(user)
    text = records.export_text(agent).replace('"never"', '"sometimes"')
    with pytest.raises(agents.AgentRefused, match=r"Not imported: .*tool_policies"):
        records.read(text)
