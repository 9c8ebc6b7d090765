"""The settings and the most tools a request may carry: choices offering more than 128 tools are
warned of in one line (counted by source, as a run counts them); a tool that runs only as an
MCP task is shown as such and cannot be chosen."""

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
from chat.tool_choices import TASK_ONLY_TEXT, flat, limit_warning, tool_choices

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object"}


def server_with(name: str, count: int, *, task_only: int = 0) -> McpServer:
    server = McpServer.objects.create(name=name, transport="http", url=f"http://{name}/mcp")
    tools = [mcp.ServerTool(f"tool_{n:03d}", "Small.", SCHEMA) for n in range(count)]
    tools += [
        mcp.ServerTool(f"long_{n}", "Runs as a task.", SCHEMA, task_support="required")
        for n in range(task_only)
    ]
    save_tools(server.pk, tools)
    return server


def conversation_of(owner: Any, *tools: str) -> Conversation:
    made = make.conversation(owner, "tools")
    made.parameters = {"enabled_tools": list(tools)}  # as the settings store a choice
    made.save()
    return made


def settings_page(client: Client, made: Conversation) -> str:
    return client.get(reverse("chat:conversation_settings", args=[made.pk])).text


def test_choices_past_the_limit_are_warned_of_counted_by_source() -> None:
    server_with("docs", 20, task_only=3)
    server_with("filler", 109)
    built_in = agent.default_registry.built_in_names()
    chosen = [*built_in, "docs__*", "filler__*"]

    warning = limit_warning(tool_choices(chosen), chosen)

    total = 129 + len(built_in)
    assert warning == (
        f"These choices offer {total} tools; the most a request may carry is 128. "
        f"By source: docs (20), filler (109), built-in ({len(built_in)}). "
        "A run fails with them: turn some off."
    )
    fewer = ["docs__*", *(f"filler__tool_{n:03d}" for n in range(100))]
    assert limit_warning(tool_choices(fewer), fewer) == ""  # 120 tools; task-only ones not counted


def test_a_tool_chosen_alone_and_with_its_whole_server_counts_once() -> None:
    server_with("filler", 127)
    chosen = ["filler__*", "filler__tool_001", "get_current_time"]
    assert limit_warning(tool_choices(chosen), chosen) == ""
    chosen.append("handoff_note")
    assert limit_warning(tool_choices(chosen), chosen).startswith("These choices offer 129 tools")


def test_the_settings_page_warns_in_one_line_and_after_a_save(client_in: Client, user: Any) -> None:
    server_with("filler", 130)
    made = conversation_of(user, "filler__tool_001")
    assert 'id="tool-limit"' not in settings_page(client_in, made)

    url = reverse("chat:conversation_settings", args=[made.pk])
    data = make.settings_form(**{"agent-enabled_tools": ["filler__*", "get_current_time"]})
    page = client_in.post(url, data, headers={"HX-Request": "true"}).text

    made.refresh_from_db()
    assert made.parameters["enabled_tools"] == ["filler__*", "get_current_time"]  # saved
    assert '<fieldset class="tools" aria-describedby="tool-limit">' in page
    assert (
        '<p id="tool-limit" class="error tool-limit" role="status">These choices offer 131 tools;'
        in page
    )
    assert (
        "By source: filler (130), built-in (1). A run fails with them: turn some off.</p>" in page
    )
    assert 'id="tool-limit"' in settings_page(client_in, made)


def test_a_task_only_tool_is_shown_as_such_and_cannot_be_chosen(
    client_in: Client, user: Any
) -> None:
    server_with("docs", 2, task_only=1)
    made = conversation_of(user, "docs__tool_000")

    page = settings_page(client_in, made)

    box = page.split('value="docs__long_0"', 1)[1].split("</li>", 1)[0]
    assert " disabled>" in box and " checked" not in box
    assert f"Long 0 ({TASK_ONLY_TEXT})</label>" in box
    assert "docs__long_0" not in dict(flat(tool_choices(["docs__tool_000"])))
    panel = AgentSettings(
        made, make.settings_form(**{"agent-enabled_tools": ["docs__long_0"]}), user=user
    )
    assert not panel.is_valid()
    assert panel.form.errors["enabled_tools"] == [
        "Select a valid choice. docs__long_0 is not one of the available choices."
    ]


def test_a_task_only_tool_chosen_before_stays_a_choice_that_can_be_unticked(user: Any) -> None:
    server_with("docs", 1, task_only=1)
    made = conversation_of(user, "docs__long_0", "docs__tool_000")

    choice = next(
        c for g in tool_choices(["docs__long_0"]) for c in g.choices if c.name == "docs__long_0"
    )
    assert (choice.label, choice.selectable) == (f"Long 0 ({TASK_ONLY_TEXT})", True)
    kept = AgentSettings(
        made,
        make.settings_form(**{"agent-enabled_tools": ["docs__long_0", "docs__tool_000"]}),
        user=user,
    )
    assert kept.is_valid(), kept.form.errors
    kept.save()
    made.refresh_from_db()
    assert made.parameters["enabled_tools"] == ["docs__long_0", "docs__tool_000"]
