"""The difference between two versions, or a version and a conversation's settings now
(chat/agents/differences.py)."""

from __future__ import annotations

import pytest

from chat import agents
from chat.agent.contracts import AgentParameters
from chat.agents import Configuration, Line, TextChange, ValueChange
from chat.models import ProviderProfile
from chat.testing import factories as make

from .test_versions import chosen, with_settings


@pytest.mark.django_db
def test_the_difference_between_two_versions_reads_as_a_person_would_say_it() -> None:
    ada = make.user("ada")
    made = chosen(
        ada,
        ["get_current_time", "handoff_note", "docs__*"],
        system_prompts=["You answer for support.\nBe brief.\nSign as Ada.", "Use French."],
        pre_messages=[{"role": "user", "content": "Hi"}],
        temperature=0.2,
    )
    agent = agents.create_agent(name="Support", conversation=made, user=ada)
    made.profile = ProviderProfile.objects.create(
        name="mistral", base_url="https://api.mistral.ai/v1", model="mistral-small"
    )
    made.parameters = {
        "system_prompts": ["You answer for support.\nBe thorough.\nSign as Ada.\nCite docs."],
        "pre_messages": [{"role": "assistant", "content": "Hi"}],
        "enabled_tools": ["get_current_time", "docs__search_docs", "search_cards"],
        "max_tokens": 512,
    }
    made.save()
    draft = agents.new_version(agent=agent, conversation=made, user=ada)

    change = agents.difference(agent.published, draft)

    first, second = change.system_prompts
    assert first.label == "System prompt 1" and first.kind == "changed"
    assert first.lines() == (
        Line("You answer for support.", "You answer for support.", "same"),
        Line("Be brief.", "Be thorough.", "changed"),
        Line("Sign as Ada.", "Sign as Ada.", "same"),
        Line(None, "Cite docs.", "added"),
    )
    assert (second.before, second.after, second.kind) == ("Use French.", None, "removed")
    assert second.lines() == (Line("Use French.", None, "removed"),)
    (pre,) = change.pre_messages
    assert (pre.label, pre.kind) == ("Pre-message 1 (user → assistant)", "changed")
    assert (change.tools_added, change.tools_removed) == (
        ("docs__search_docs", "search_cards"),
        ("handoff_note", "docs__*"),
    )
    assert change.tools_kept == ("get_current_time",)
    assert change.settings == (
        ValueChange("Endpoint", "Server default", "mistral"),
        ValueChange(
            "Model", "Scripted model (offline), the endpoint's", "mistral-small, the endpoint's"
        ),
        ValueChange("Temperature", "0.2", "provider default"),
        ValueChange("Max tokens", "provider default", "512"),
    )
    assert change.summary() == [
        "Endpoint: Server default → mistral",
        "Model: Scripted model (offline), the endpoint's → mistral-small, the endpoint's",
        "Temperature: 0.2 → provider default",
        "Max tokens: provider default → 512",
        "System prompt 1: changed",
        "System prompt 2: removed",
        "Pre-message 1 (user → assistant): changed",
        "Tools added: docs__search_docs, search_cards",
        "Tools removed: handoff_note, docs__*",
    ]
    assert not change.empty


@pytest.mark.django_db
def test_a_version_against_itself_and_the_order_of_tools_make_no_difference() -> None:
    ada = make.user("ada")
    made = chosen(ada, ["get_current_time", "handoff_note"], system_prompts=["Be brief."])
    version = agents.create_agent(name="Support", conversation=made, user=ada).published
    swapped = Configuration(
        None,
        AgentParameters.from_stored(
            {"system_prompts": ["Be brief."], "enabled_tools": ["handoff_note", "get_current_time"]}
        ),
    )

    for other in (version, swapped):
        change = agents.difference(version, other)
        assert change.empty and change.summary() == []
        (prompt,) = change.system_prompts
        assert prompt.kind == "same"
        assert prompt.lines() == (Line("Be brief.", "Be brief.", "same"),)


@pytest.mark.django_db
def test_what_a_conversation_changed_since_its_version() -> None:
    ada = make.user("ada")
    made = chosen(ada, system_prompts=["Be brief."])
    agent = agents.create_agent(name="Support", conversation=made, user=ada)
    with_settings(made, model="gpt-x", max_event_loops=3)

    change = agents.difference(made.changed_from(), Configuration.of(made))

    assert change.summary() == [
        "Model: Scripted model (offline), the endpoint's → gpt-x",
        "Max event loops: 8 → 3",
    ]
    assert agent.published == made.changed_from()


def test_lines_of_a_prompt_added_whole() -> None:
    added = TextChange("System prompt 2", None, "One.\nTwo.")
    assert added.kind == "added" and added.changed
    assert added.lines() == (Line(None, "One.", "added"), Line(None, "Two.", "added"))
