"""Evaluations never execute a tool nor wait for a person, and record which of the model's
first-turn calls would have waited for approval (or been refused) under the evaluated
configuration's policies: on the result, the evaluation's table, the attempt's page and the
terminal's output."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from chat import agent
from chat.evals import cases, replay
from chat.evals.gated import gated_calls
from chat.models import Agent, AgentVersion, Case, EvalResult, ProviderProfile
from chat.testing import evals as made_for
from chat.testing import factories as make
from chat.testing.openai_script import MODEL, tool_turn
from chat.testing.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)

NOTE = ("call_1", "handoff_note", '{"note": "ship it"}')
SEARCH = ("call_2", "search_cards", '{"query": "pills"}')
TIME = ("call_3", "get_current_time", "{}")
WAITED = "would have waited for approval: Handoff note"


def calls(*names: str) -> list[agent.ToolCall]:
    return [agent.ToolCall(id=f"c{n}", name=name) for n, name in enumerate(names)]


def test_the_policies_chosen_else_each_tools_default_decide(db: Any) -> None:
    parameters = {
        "enabled_tools": ["handoff_note", "search_cards", "get_current_time"],
        "tool_policies": {"search_cards": "never"},
    }
    found = gated_calls(parameters, calls("handoff_note", "get_current_time", "search_cards"))
    assert found == [
        {"name": "handoff_note", "policy": "ask"},
        {"name": "search_cards", "policy": "never"},
    ]
    allowed = {**parameters, "tool_policies": {"handoff_note": "run"}}
    assert gated_calls(allowed, calls("handoff_note", "search_cards")) == []
    # A call of a tool the replay did not enable fails before any policy applies.
    assert gated_calls({"enabled_tools": ["search_cards"]}, calls("handoff_note")) == []


def test_the_words_for_what_would_have_happened() -> None:
    result = EvalResult(
        gated_calls=[
            {"name": "handoff_note", "policy": "ask"},
            {"name": "handoff_note", "policy": "ask"},
            {"name": "search_cards", "policy": "never"},
        ]
    )
    assert result.gated_text == f"{WAITED}; would have been refused: Search cards"
    assert EvalResult().gated_text == ""


@pytest.fixture
def owner() -> Any:
    return make.user()


@pytest.fixture
def case(owner: Any) -> Case:
    """The pills case, its replay offering the note and the clock too, the search never."""
    kept = made_for.search_case(owner)
    names = ["search_cards", "get_current_time", "handoff_note"]
    kept.tools = cases.openai_tools(names)
    kept.parameters = {
        **kept.parameters,
        "enabled_tools": names,
        "tool_policies": {"search_cards": "never"},
    }
    kept.save()
    return kept


def test_an_evaluation_records_the_calls_that_would_have_waited(
    case: Case, owner: Any, fake_openai: FakeOpenAIServer, client: Any
) -> None:
    fake_openai.enqueue(tool_turn([NOTE, TIME, SEARCH]))

    done = replay.evaluate(
        [case], replay.target(base_url=fake_openai.base_url, model=MODEL), user=owner
    )

    (result,) = replay.results(done)
    assert result.gated_calls == [
        {"name": "handoff_note", "policy": "ask"},
        {"name": "search_cards", "policy": "never"},
    ]
    assert result.run is not None and result.run.status == "completed"  # nothing waited
    replies = result.run.conversation.messages.filter(role="tool").count()
    assert replies == 3 and not result.run.tool_calls.filter(approval="waiting").exists()
    client.force_login(owner)
    table = client.get(reverse("chat:evals:run", args=[done.pk])).content.decode()
    said = "Would have waited for approval: Handoff note; would have been refused: Search cards"
    assert f'<p class="eval-gated">{said}</p>' in table
    page = client.get(reverse("chat:run_detail", args=[result.run.conversation_id, result.run_id]))
    assert "Would have waited for approval: Handoff note" in page.content.decode()


def test_an_agent_versions_own_policies_are_the_ones_evaluated(
    case: Case, owner: Any, fake_openai: FakeOpenAIServer
) -> None:
    profile = ProviderProfile.objects.create(
        name="fake", base_url=fake_openai.base_url, model=MODEL, available_to_everyone=True
    )
    version = AgentVersion.objects.create(
        agent=Agent.objects.create(name="Careful", slug="careful", owner=owner),
        number=1,
        author=owner,
        profile=profile,
        parameters={
            "model": MODEL,
            "enabled_tools": ["get_current_time", "handoff_note"],
            "tool_policies": {"get_current_time": "ask", "handoff_note": "run"},
        },
    )
    fake_openai.enqueue(tool_turn([TIME, NOTE]))

    done = replay.evaluate([case], replay.target(version=version), user=owner)

    (result,) = replay.results(done)
    assert result.gated_calls == [{"name": "get_current_time", "policy": "ask"}]
    assert result.gated_text == "would have waited for approval: Get current time"


def test_the_terminal_names_the_calls_under_the_cases_row(
    case: Case, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.enqueue(tool_turn([NOTE]), tool_turn([NOTE]))
    out, err = io.StringIO(), io.StringIO()
    base = ["--base-url", fake_openai.base_url, "--model", MODEL]
    with pytest.raises(CommandError, match="did not pass"):
        call_command("eval", *base, stdout=out, stderr=err)

    lines = out.getvalue().splitlines()
    row = next(n for n, line in enumerate(lines) if line.startswith(f"#{case.pk} "))
    assert lines[row + 1] == f"    {WAITED}"

    with pytest.raises(CommandError):
        call_command("eval", *base, "--json", stdout=(document := io.StringIO()), stderr=err)
    (attempt,) = json.loads(document.getvalue())["cases"][0]["attempts"]
    assert attempt["gated_calls"] == [{"name": "handoff_note", "policy": "ask"}]
