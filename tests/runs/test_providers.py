"""Tests of chat.runs.providers: which endpoint and model a conversation uses, for every caller."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from chat import agent
from chat.agent.clients import OpenAICompatibleChatClient
from chat.agent.scripted import SCRIPTED_LABEL, SCRIPTED_MODEL, ScriptedChatClient
from chat.models import Conversation, ProviderProfile
from chat.runs import RunRefused
from chat.runs.providers import (
    build_client,
    conversation_endpoint,
    endpoint,
    known_keys,
    model_expression,
)

pytestmark = pytest.mark.django_db

ENV = {"OPENAI_BASE_URL": "http://env.test/v1", "AGENTLAB_MODEL": "env-model"}


def profile(**fields: object) -> ProviderProfile:
    values: dict[str, object] = {
        "name": "mistral",
        "base_url": "https://api.mistral.test/v1",
        "model": "mistral-small",
        "api_key_env": "MISTRAL_TEST_KEY",
        "tool_call_ids": "alnum9",
    }
    return ProviderProfile.objects.create(**{**values, **fields})


def conversation(*, model: str | None = None, on: ProviderProfile | None = None) -> Conversation:
    owner, _ = User.objects.get_or_create(username="ada")
    made = Conversation(owner=owner, profile=on)
    made.set_agent_parameters(agent.AgentParameters(model=model))
    made.save()
    return made


def test_without_a_provider_the_scripted_model_answers() -> None:
    target = endpoint()
    assert target.scripted and target.label == SCRIPTED_LABEL and target.model == SCRIPTED_MODEL
    assert isinstance(build_client(target), ScriptedChatClient)


@override_settings(**ENV, OPENAI_API_KEY="env-key-123")
def test_the_environment_endpoint_and_its_key() -> None:
    target = endpoint()
    assert (target.base_url, target.model, target.key_variable) == (
        "http://env.test/v1",
        "env-model",
        "OPENAI_API_KEY",
    )
    assert target.api_key() == "env-key-123"
    client = build_client(target)
    assert isinstance(client, OpenAICompatibleChatClient) and client.model == "env-model"


def test_a_profile_wins_over_the_environment_and_reads_its_own_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MISTRAL_TEST_KEY", "mistral-key-456")
    with override_settings(**ENV):
        target = endpoint(profile())
    assert (target.base_url, target.model) == ("https://api.mistral.test/v1", "mistral-small")
    assert target.api_key() == "mistral-key-456"
    assert target.wire.tool_call_ids == "alnum9"


def test_a_conversations_own_model_wins_and_a_base_url_override_drops_the_profile() -> None:
    chosen = profile()
    assert endpoint(chosen, model="mistral-large").model == "mistral-large"
    with override_settings(**ENV):
        overridden = endpoint(chosen, base_url="http://other.test/v1")
    assert overridden.profile is None and overridden.key_variable == "OPENAI_API_KEY"
    assert (overridden.base_url, overridden.model) == ("http://other.test/v1", "env-model")


@override_settings(OPENAI_BASE_URL="http://env.test/v1", AGENTLAB_MODEL="")
def test_an_http_endpoint_without_a_model_is_refused() -> None:
    target = endpoint()
    assert target.label == "model not set"
    with pytest.raises(RunRefused, match="AGENTLAB_MODEL"):
        build_client(target)


@pytest.mark.parametrize("environment", [{}, ENV])
def test_the_sql_rule_agrees_with_the_python_rule(environment: dict[str, str]) -> None:
    """The admin's model column and filter use model_expression(); the page and runs use
    endpoint(): both must name the same model for every kind of conversation."""
    with override_settings(**environment):
        chosen = profile()
        made = [
            conversation(),
            conversation(model="own-model"),
            conversation(on=chosen),
            conversation(model="own-model", on=chosen),
        ]
        annotated = dict(
            Conversation.objects.annotate(model_name=model_expression()).values_list(
                "pk", "model_name"
            )
        )
        for one in made:
            assert annotated[one.pk] == conversation_endpoint(one).model, one.parameters


def test_known_keys_are_the_environments_and_the_profiles_set_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MISTRAL_TEST_KEY", "mistral-key-456")
    profile()
    profile(name="unset", api_key_env="UNSET_TEST_KEY")
    profile(name="keyless", api_key_env="")
    with override_settings(OPENAI_API_KEY="env-key-123"):
        assert sorted(known_keys()) == ["env-key-123", "mistral-key-456"]
