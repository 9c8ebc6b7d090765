"""Tests of chat.runs.providers: which endpoint and model a conversation uses, for every caller."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from django.conf import LazySettings
from django.contrib.auth.models import User
from django.test import override_settings

from chat import agent, runs
from chat.agent.clients import OpenAICompatibleChatClient
from chat.agent.scripted import SCRIPTED_LABEL, SCRIPTED_MODEL, ScriptedChatClient
from chat.models import Conversation, McpServer, ProviderProfile, Run
from chat.runs import RunRefused
from chat.runs.providers import (
    SERVER_SECRETS,
    KeyStatus,
    build_client,
    conversation_endpoint,
    endpoint,
    key_status,
    key_variable_problem,
    known_keys,
    model_expression,
    read_key,
)
from chat.testing import factories as make
from chat.testing.openai_script import MODEL, text_turn
from chat.testing.openai_server import FakeOpenAIServer

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
    assert overridden.profile is None and overridden.key_variable == "", "no key to another URL"
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


def test_known_keys_include_the_mcp_servers_secrets_and_only_allowed_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What an MCP server's tool echoes of its own header is redacted where requests are
    shown, as a provider's key is; a variable off the MCP allow-list is never read."""
    monkeypatch.setenv("AGENTLAB_MCP_KEY_DOCS", "mcp-header-789")
    monkeypatch.setenv("AGENTLAB_MCP_KEY_ENV", "mcp-env-012")
    monkeypatch.setenv("SOMEONES_TOKEN", SERVER_SECRET)
    McpServer.objects.create(
        name="docs",
        url="https://docs.example/mcp",
        headers={"Authorization": "AGENTLAB_MCP_KEY_DOCS"},
    )
    McpServer.objects.create(
        name="local", transport="stdio", command="x", env={"TOKEN": "AGENTLAB_MCP_KEY_ENV"}
    )
    McpServer.objects.create(
        name="odd", url="https://odd.example/mcp", headers={"X": "SOMEONES_TOKEN"}
    )
    assert sorted(known_keys()) == ["mcp-env-012", "mcp-header-789"]


# Which key goes where ------------------------------------------------------------------------

SERVER_SECRET = "server-secret-canary-5d1e0b"


@pytest.mark.parametrize("variable", ["SECRET_KEY", "DATABASE_URL", "REDIS_URL"])
def test_a_profile_naming_a_server_secret_is_refused_even_when_listed(
    variable: str, monkeypatch: pytest.MonkeyPatch, settings: LazySettings
) -> None:
    """A row written before the allow-list existed, or straight into the database."""
    monkeypatch.setenv(variable, SERVER_SECRET)
    settings.AGENTLAB_KEY_VARIABLES = [variable]
    target = endpoint(profile(api_key_env=variable))
    with pytest.raises(RunRefused, match="names a key variable the server does not allow"):
        build_client(target)


@pytest.mark.parametrize("variable", ["SOMEONES_TOKEN", "sk-live-0123456789abcdef"])
def test_a_profile_naming_a_variable_that_is_not_allowed_is_refused(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, SERVER_SECRET)
    with pytest.raises(RunRefused) as refused:
        build_client(endpoint(profile(api_key_env=variable)))
    assert "names a key variable the server does not allow" in str(refused.value)
    assert variable not in str(refused.value), "a key typed as a name is not echoed"


def test_allowed_key_variables_are_read(
    monkeypatch: pytest.MonkeyPatch, settings: LazySettings
) -> None:
    monkeypatch.setenv("MISTRAL_TEST_KEY", "listed-key")
    monkeypatch.setenv("AGENTLAB_KEY_VLLM", "prefixed-key")
    monkeypatch.setenv("OPENAI_API_KEY", "environment-key")
    settings.OPENAI_API_KEY = "environment-key"
    read = {
        name: endpoint(profile(name=name, api_key_env=name)).api_key()
        for name in ("MISTRAL_TEST_KEY", "AGENTLAB_KEY_VLLM", "OPENAI_API_KEY")
    }
    assert read == {
        "MISTRAL_TEST_KEY": "listed-key",
        "AGENTLAB_KEY_VLLM": "prefixed-key",
        "OPENAI_API_KEY": "environment-key",
    }


def test_known_keys_leave_out_variables_that_are_not_allowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SOMEONES_TOKEN", SERVER_SECRET)
    profile(api_key_env="SOMEONES_TOKEN")
    assert SERVER_SECRET not in known_keys()


@pytest.mark.django_db(transaction=True)
async def test_a_run_on_a_profile_naming_a_server_secret_sends_nothing(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_KEY", SERVER_SECRET)
    fake_openai.enqueue(text_turn("leaked"))

    def prepare() -> tuple[Conversation, User]:
        owner = make.user("root", is_staff=True, is_superuser=True)
        made = make.conversation(owner, "secret")
        made.profile = profile(base_url=fake_openai.base_url, api_key_env="SECRET_KEY")
        made.save()
        return made, owner

    made, owner = await database_sync_to_async(prepare)()

    with pytest.raises(RunRefused, match="names a key variable the server does not allow"):
        await runs.start_run(conversation=made, user=owner, content="hi")
    assert fake_openai.requests == []
    assert not await Run.objects.filter(conversation=made).aexists()


@override_settings(OPENAI_BASE_URL="http://env.test/v1", OPENAI_API_KEY="env-key-123")
def test_the_environment_key_goes_only_to_the_environment_url() -> None:
    assert endpoint(base_url="http://env.test/v1/").api_key() == "env-key-123"
    elsewhere = endpoint(base_url="http://other.test/v1")
    assert elsewhere.key_variable == "" and elsewhere.api_key() is None


@pytest.mark.django_db(transaction=True)
async def test_a_run_on_a_profile_the_sender_may_not_use_is_refused(
    fake_openai: FakeOpenAIServer,
) -> None:
    """The conversation was put on the profile while its owner could still use it."""
    fake_openai.enqueue(text_turn("should not be asked"))

    def prepare() -> tuple[Conversation, User]:
        owner = make.user("ada")
        made = make.conversation(owner, "closed")
        made.profile = profile(base_url=fake_openai.base_url)
        made.save()
        return made, owner

    made, owner = await database_sync_to_async(prepare)()

    with pytest.raises(RunRefused, match="You may not use the provider 'mistral'"):
        await runs.start_run(conversation=made, user=owner, content="hi")
    assert fake_openai.requests == []
    assert not await Run.objects.filter(conversation=made).aexists()


SETTINGS_PY = Path(__file__).resolve().parents[2] / "agentlab_site" / "settings.py"


def test_no_variable_the_settings_read_can_be_a_key_unless_listed() -> None:
    """Except OPENAI_API_KEY, the environment endpoint's own key."""
    read = set(
        re.findall(
            r"(?:environ\.get|env_bool|env_list)\(\s*\"([A-Z][A-Z0-9_]*)\"",
            SETTINGS_PY.read_text(),
        )
    )
    assert {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "OPENAI_API_KEY"} <= read
    allowed = {name for name in read if key_variable_problem(name) is None}
    assert allowed == {"OPENAI_API_KEY"}


def test_the_servers_own_secrets_are_never_allowed(settings: LazySettings) -> None:
    settings.AGENTLAB_KEY_VARIABLES = sorted(SERVER_SECRETS)
    for name in SERVER_SECRETS:
        assert "never sent to a provider" in (key_variable_problem(name) or ""), name
        assert key_status(name) is KeyStatus.NOT_ALLOWED
    assert "AGENTLAB_KEY_VARIABLES" in SERVER_SECRETS, "the prefix does not open the list"


def test_the_allow_list(settings: LazySettings) -> None:
    settings.AGENTLAB_KEY_VARIABLES = ["MISTRAL_API_KEY"]
    for name in ("", "OPENAI_API_KEY", "AGENTLAB_KEY_VLLM", "MISTRAL_API_KEY"):
        assert key_variable_problem(name) is None, name
    assert "AGENTLAB_KEY_VARIABLES" in (key_variable_problem("DEEPSEEK_API_KEY") or "")


def test_the_status_of_a_variable_that_is_not_allowed_says_nothing_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SOMEONES_TOKEN", SERVER_SECRET)
    monkeypatch.setenv("MISTRAL_TEST_KEY", "mistral-key-456")
    assert key_status("SOMEONES_TOKEN") is KeyStatus.NOT_ALLOWED
    assert read_key("SOMEONES_TOKEN") is None
    monkeypatch.delenv("SOMEONES_TOKEN")
    assert key_status("SOMEONES_TOKEN") is KeyStatus.NOT_ALLOWED
    assert key_status("MISTRAL_TEST_KEY") is KeyStatus.SET
    assert key_status("UNSET_TEST_KEY") is KeyStatus.UNSET
    assert key_status("") is KeyStatus.NONE


@pytest.mark.django_db(transaction=True)
async def test_runs_share_a_kept_alive_connection_and_no_cookies(
    fake_openai: FakeOpenAIServer,
) -> None:
    """One connection pool per process: the second run reuses the first one's connection,
    and a cookie the provider set is not sent back (with another user's request, say)."""
    fake_openai.enqueue(
        text_turn("first").but(headers=(("Set-Cookie", "tracker=abc; Path=/"),)),
        text_turn("second"),
    )
    with override_settings(OPENAI_BASE_URL=fake_openai.base_url, AGENTLAB_MODEL=MODEL):
        made = await make.aconversation()
        for content in ("one", "two"):
            run = await (await make.start_as_owner(made, content)).task
            assert run.status == "completed"
    first, second = fake_openai.requests
    assert first.peer == second.peer
    assert "cookie" not in second.headers
