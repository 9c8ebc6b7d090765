"""Tests of chat/tool_policies.py: each tool's policy in a conversation's settings, its default
preselected and marked, only differences stored, a conversation started from an agent version
only tightening it, and "Always allow" taken back with Ask again."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from chat import agents
from chat.models import Conversation, McpServer, McpTool
from chat.settings_panel import AgentSettings
from chat.testing import factories as make
from chat.tool_policies import PolicyForm

pytestmark = pytest.mark.django_db

BUILT_IN = ["get_current_time", "handoff_note", "search_cards"]


def docs_server() -> McpServer:
    """An MCP server that lists a tool that only reads and one that writes."""
    server = McpServer.objects.create(
        name="docs", transport="http", url="http://127.0.0.1:9/mcp", status=McpServer.Status.UP
    )
    McpTool.objects.create(
        server=server,
        name="search",
        exposed_name="docs__search",
        annotations={"read_only_hint": True},
    )
    McpTool.objects.create(server=server, name="write", exposed_name="docs__write")
    return server


def stored(owner: Any, **parameters: Any) -> Conversation:
    """A conversation with these parameters as stored (MCP tools are not in the registry)."""
    return Conversation.objects.create(owner=owner, parameters=parameters)


def posted(**policies: str) -> dict[str, Any]:
    """The settings panel's POST with these policies (`policy-<tool>`) and every built-in."""
    fields = {f"policy-{name}": policy for name, policy in policies.items()}
    return make.settings_form(**{"agent-enabled_tools": BUILT_IN}, **fields)


def saved(conversation: Conversation, data: dict[str, Any]) -> AgentSettings:
    panel = AgentSettings(conversation, data, user=conversation.owner)
    assert panel.is_valid(), (panel.policies.errors, panel.non_field_errors)
    panel.save()
    conversation.refresh_from_db()
    return panel


def selects(html: str) -> dict[str, tuple[str, str]]:
    """Each policy select on a page: its label, and the selected option's text."""
    found = {}
    for match in re.finditer(r'<select name="policy-([\w-]+)".*?</select>', html, re.S):
        name = match.group(1)
        label = re.search(rf'<label for="id_policy-{name}"[^>]*>([^<]*)</label>', html)
        chosen = re.search(r"<option [^>]*selected>([^<]*)</option>", match.group(0))
        assert label and chosen, name
        found[name] = (unescape(label.group(1)), unescape(chosen.group(1)))
    return found


def careful(owner: Any, **parameters: Any) -> Conversation:
    """A conversation started from Careful@2, an agent whose version 2 holds `parameters`."""
    first = make.conversation(owner, enabled_tools=BUILT_IN)
    careful = agents.create_agent(name="Careful", conversation=first, user=owner)
    second = make.conversation(owner, enabled_tools=BUILT_IN, **parameters)
    version = agents.new_version(agent=careful, conversation=second, user=owner)
    assert version.number == 2
    return agents.start_conversation(user=owner, version=version)


def test_each_tool_shows_its_policy_the_default_preselected_and_marked(
    client_in: Client, user: Any
) -> None:
    docs_server()
    made = stored(user, enabled_tools=[*BUILT_IN, "docs__*"], tool_policies={"search_cards": "ask"})
    html = client_in.get(reverse("chat:conversation_settings", args=[made.pk])).content.decode()
    shown = selects(html)
    assert {name: shown[name] for name in [*BUILT_IN, "docs__search", "docs__write"]} == {
        "get_current_time": ("Policy for Get current time", "Run without asking (default)"),
        "handoff_note": ("Policy for Handoff note", "Ask first (default)"),
        "search_cards": ("Policy for Search cards", "Ask first"),
        # A whole server's tools, each with its own (readOnlyHint: runs without asking).
        "docs__search": ("Policy for Search", "Run without asking (default)"),
        "docs__write": ("Policy for Write", "Ask first (default)"),
    }
    assert "Each tool below has its own policy." in html
    options = re.search(r'<select name="policy-search_cards".*?</select>', html, re.S)
    assert options is not None
    assert re.findall(r">([^<]+)</option>", options.group(0)) == [
        "Run without asking (default)",
        "Ask first",
        "Never run",
    ]


def test_only_choices_that_differ_from_the_default_are_stored() -> None:
    owner = make.user()
    made = make.conversation(
        owner, enabled_tools=BUILT_IN, tool_policies={"handoff_note": "never", "gone_tool": "run"}
    )
    saved(made, posted(get_current_time="run", handoff_note="ask", search_cards="never"))
    # Handoff note is back to its default (nothing stored); a tool not listed here keeps its own.
    assert made.parameters["tool_policies"] == {"search_cards": "never", "gone_tool": "run"}

    # A tool the POST leaves out keeps its stored choice; back to every default, nothing stored.
    saved(made, posted(get_current_time="never"))
    assert made.parameters["tool_policies"] == {
        "get_current_time": "never",
        "search_cards": "never",
        "gone_tool": "run",
    }
    saved(made, posted(get_current_time="run", search_cards="run"))
    assert made.parameters["tool_policies"] == {"gone_tool": "run"}


def test_a_whole_servers_tools_each_keep_their_own_policy() -> None:
    docs_server()
    owner = make.user()
    made = stored(owner, enabled_tools=["docs__*"])
    data = posted(docs__write="never", docs__search="run")
    data["agent-enabled_tools"] = ["docs__*"]
    panel = saved(made, data)
    assert "docs__*" not in panel.policies.fields
    assert made.parameters["tool_policies"] == {"docs__write": "never"}
    assert made.agent_parameters().enabled_tools == ("docs__*",)


def test_a_made_up_policy_is_refused() -> None:
    made = make.conversation(make.user(), enabled_tools=BUILT_IN)
    panel = AgentSettings(made, posted(handoff_note="sometimes"), user=made.owner)
    assert not panel.is_valid()
    assert "Select a valid choice" in str(panel.policies.errors["handoff_note"])


def test_a_conversation_may_only_tighten_the_agent_version_it_started_from(
    client_in: Client, user: Any
) -> None:
    made = careful(user, tool_policies={"search_cards": "ask", "get_current_time": "never"})
    before = dict(made.parameters)
    url = reverse("chat:conversation_settings", args=[made.pk])

    # The agent's choices, and its defaults, are what a conversation starts with.
    html = client_in.get(url).content.decode()
    assert selects(html)["search_cards"][1] == "Ask first"
    assert "Started from the agent Careful@2" in html

    response = client_in.post(url, posted(handoff_note="run"))
    assert response.status_code == 422
    line = "Handoff note: the agent Careful@2 asks first; a conversation may only tighten that."
    assert unescape(response.content.decode()).count(line) == 1
    made.refresh_from_db()
    assert made.parameters == before

    panel = AgentSettings(made, posted(search_cards="run", get_current_time="ask"), user=made.owner)
    assert not panel.is_valid()
    assert panel.policies.errors == {
        "search_cards": [
            "Search cards: the agent Careful@2 asks first; a conversation may only tighten that."
        ],
        "get_current_time": [
            "Get current time: the agent Careful@2 never runs it; a conversation may only "
            "tighten that."
        ],
    }

    # Stricter is always allowed.
    saved(made, posted(handoff_note="never", search_cards="never"))
    assert made.parameters["tool_policies"] == {
        "get_current_time": "never",
        "handoff_note": "never",
        "search_cards": "never",
    }


def test_a_conversation_from_default_may_loosen_anything() -> None:
    made = make.conversation(make.user(), enabled_tools=BUILT_IN)
    form = PolicyForm(
        {"policy-handoff_note": "run"},
        groups=AgentSettings(made, user=made.owner).tool_groups,
        current=made.agent_parameters(),
        conversation=made,
    )
    assert form.is_valid() and form.floor_note == ""
    assert form.cleaned_data["tool_policies"] == {"handoff_note": "run"}


def test_always_allowed_tools_are_listed_and_asked_about_again(
    client_in: Client, user: Any
) -> None:
    made = make.conversation(user, enabled_tools=BUILT_IN)
    Conversation.objects.filter(pk=made.pk).update(always_allowed=["handoff_note", "docs__write"])
    url = reverse("chat:conversation_settings", args=[made.pk])
    html = client_in.get(url).content.decode()
    assert "Always allowed in this conversation" in html
    assert 'aria-label="Ask again before Handoff note runs"' in html
    assert 'aria-label="Ask again before Write (docs) runs"' in html

    # Ask again takes back that grant at once, and nothing else the panel holds is saved.
    data = {**posted(), "agent-temperature": "1.5", "ask_again": "handoff_note"}
    response = client_in.post(url, data, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    page = unescape(response.content.decode())
    assert "Handoff note is no longer always allowed here" in page
    assert "Ask again before Handoff note runs" not in page
    assert re.search(r'<select name="policy-handoff_note"[^>]* autofocus', page)
    made.refresh_from_db()
    assert made.always_allowed == ["docs__write"]
    assert made.agent_parameters().temperature is None

    response = client_in.post(url, {**posted(), "ask_again": "handoff_note"})
    assert "Handoff note is not always allowed here: nothing changed." in unescape(
        response.content.decode()
    )
    client_in.post(url, {**posted(), "ask_again": "docs__write"})
    made.refresh_from_db()
    assert made.always_allowed == []
    assert "Always allowed in this conversation" not in client_in.get(url).content.decode()


def test_only_the_owner_asks_again(client: Client) -> None:
    owner, bob = make.user("ada"), make.user("bob")
    made = make.conversation(owner, enabled_tools=BUILT_IN)
    Conversation.objects.filter(pk=made.pk).update(always_allowed=["handoff_note"], shared=True)
    client.force_login(bob)
    url = reverse("chat:conversation_settings", args=[made.pk])
    assert client.post(url, {**posted(), "ask_again": "handoff_note"}).status_code == 404
    made.refresh_from_db()
    assert made.always_allowed == ["handoff_note"]
