"""Agents and their versions (chat/models/agents.py): a saved version never changes, one is
published per agent and is deleted only with it, what a version stores passes the gate, and a
conversation's "changed from" is derived from its settings."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError, RestrictedError

from chat import agents
from chat.models import (
    Agent,
    AgentVersion,
    Conversation,
    ImmutableVersion,
    ProviderProfile,
    Publication,
)
from chat.testing import factories as make

pytestmark = pytest.mark.django_db

MCP_TOOLS = ["get_current_time", "docs__search_docs", "docs__*"]


def support(owner: User, name: str = "Support", **parameters: Any) -> Agent:
    """An agent made from a conversation of `owner`'s with these parameters."""
    made = make.conversation(owner, "settings", **parameters)
    return agents.create_agent(name=name, conversation=made, user=owner)


def test_a_saved_version_cannot_be_saved_again() -> None:
    version = support(make.user(), system_prompts=["Be brief."]).versions.get()
    version.note = "rewritten"
    version.parameters = {"system_prompts": ["Be rude."]}

    with pytest.raises(ImmutableVersion, match="Support v1 is saved: a change is a new version"):
        version.save()

    stored = AgentVersion.objects.get(pk=version.pk)
    assert (stored.note, stored.parameters) == ("First version.", {"system_prompts": ["Be brief."]})


def test_the_published_version_is_deleted_only_with_its_agent() -> None:
    owner = make.user()
    agent = support(owner)
    conversation = make.conversation(owner, "warmer", temperature=1.0)
    draft = agents.new_version(agent=agent, conversation=conversation, user=owner)
    published = AgentVersion.objects.get(agent=agent, number=1)

    with pytest.raises(RestrictedError):
        published.delete()
    with pytest.raises(RestrictedError):
        AgentVersion.objects.filter(pk=published.pk).delete()
    draft.delete()  # a version no one published may go
    assert list(agent.versions.values_list("number", flat=True)) == [1]

    agent.delete()
    assert not AgentVersion.objects.exists() and not Publication.objects.exists()
    conversation.refresh_from_db()
    assert conversation.agent_version is None  # it now reads as started from Default


def test_deleting_an_owner_takes_their_agents_with_their_published_versions() -> None:
    owner = make.user("ada")
    support(owner)
    owner.delete()
    assert not Agent.objects.exists() and not AgentVersion.objects.exists()


def test_a_version_is_published_by_its_own_agent_alone() -> None:
    owner = make.user()
    first, second = support(owner, "Support"), support(owner, "Billing")
    with pytest.raises(IntegrityError), transaction.atomic():
        Agent.objects.filter(pk=second.pk).update(published=first.published_id)


def test_version_numbers_are_unique_per_agent() -> None:
    agent = support(make.user())
    with pytest.raises(IntegrityError), transaction.atomic():
        AgentVersion.objects.create(agent=agent, number=1)


def test_a_profile_that_versions_use_is_not_deleted_under_them() -> None:
    owner = make.user()
    profile = ProviderProfile.objects.create(name="vllm", base_url="http://vllm:8000/v1", model="m")
    conversation = make.conversation(owner, "on vllm")
    conversation.profile = profile
    conversation.save()
    agent = agents.create_agent(name="Support", conversation=conversation, user=owner)

    with pytest.raises(ProtectedError):
        profile.delete()
    assert agent.versions.get().profile == profile


DEEP = {"system_prompts": ["sentinel"]}
"""Stands for parameters nested past the gate's depth (built in the test: a deep value)."""


@pytest.mark.parametrize(
    ("parameters", "reason"),
    [
        ({"system_prompts": ["half a pair \ud800"]}, "lone surrogate"),
        ({"system_prompts": ["a NUL \x00 here"]}, "NUL character"),
        ({"temperature": float("nan")}, "nan is not a JSON number"),
        (DEEP, "nested more than 64 levels deep"),
        ({"temperature": 7}, "temperature: Input should be less than or equal to 2"),
        ({"tools": ["x"]}, "tools: Extra inputs are not permitted"),
        ([], "must be a JSON object"),
    ],
)
def test_what_a_version_stores_passes_the_gate_and_agent_parameters(
    parameters: Any, reason: str
) -> None:
    agent = support(make.user())
    if parameters is DEEP:
        parameters = {"system_prompts": [nested(70)]}
    with pytest.raises(ValidationError, match=reason):
        AgentVersion(agent=agent, number=2, parameters=parameters).save()
    assert agent.versions.count() == 1


def nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


def test_a_version_stores_its_parameters_validated_and_keeps_tools_unknown_here() -> None:
    agent = support(make.user())
    stored = {"enabled_tools": [*MCP_TOOLS, "get_current_time"], "max_event_loops": 8}
    version = AgentVersion.objects.create(agent=agent, number=2, parameters=stored)
    # Defaults are not stored, a tool chosen twice once; MCP names stay as chosen.
    assert version.parameters == {"enabled_tools": MCP_TOOLS}
    assert version.agent_parameters().enabled_tools == tuple(MCP_TOOLS)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("Support@2", "cannot hold “@”"),
        ("default", "is the built-in agent"),
        (" Support", "cannot start or end with a space"),
        ("Sup\x00port", "NUL character"),
    ],
)
def test_agent_names_commands_can_write(name: str, problem: str) -> None:
    agent = Agent(name=name, slug="s", owner=make.user())
    with pytest.raises(ValidationError, match=problem):
        agent.full_clean(exclude=["published", "suite"])


def test_changed_from_is_derived_from_the_settings_each_time() -> None:
    owner = make.user()
    agent = support(owner, system_prompts=["Be brief."], enabled_tools=["get_current_time"])
    version = agent.versions.get()
    started = agents.start_conversation(user=owner, version=version)
    assert started.changed_from() is None

    started.set_agent_parameters(started.agent_parameters().changed(temperature=0.3))
    started.save()
    assert started.changed_from() == version

    started.set_agent_parameters(started.agent_parameters().changed(temperature=None))
    started.save()
    assert started.changed_from() is None  # changed back: the version's settings again

    started.profile = ProviderProfile.objects.create(name="p", base_url="http://p:1/v1", model="m")
    assert started.changed_from() == version  # another endpoint is a change too

    started.profile = None
    started.parameters = {"enabled_tools": ["get_current_time", "oops"], "system_prompts": 1}
    assert started.changed_from() == version  # unreadable settings match no version


def test_the_order_tools_were_chosen_in_is_no_change() -> None:
    owner = make.user()
    conversation = make.conversation(owner, enabled_tools=["get_current_time", "handoff_note"])
    agent = agents.create_agent(name="Support", conversation=conversation, user=owner)
    conversation.refresh_from_db()
    assert conversation.agent_version == agent.published

    conversation.parameters = {"enabled_tools": ["handoff_note", "get_current_time"]}
    conversation.save()
    assert conversation.changed_from() is None


def test_a_conversation_without_a_version_started_from_default() -> None:
    made = Conversation.objects.create(owner=make.user())
    assert made.agent_version is None and made.changed_from() is None
