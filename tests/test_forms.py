"""Tests of chat.forms: the settings panel validates through AgentParameters, the profile form
keeps keys out of the database, the fork form bounds an edited result."""

from __future__ import annotations

import pytest

from chat.forms import (
    AgentSettings,
    ProviderProfileForm,
    ToolForkForm,
    base_url_problem,
    missing_key_warning,
)
from chat.models import ProviderProfile
from chat.runs.providers import key_variable_problem
from chat.testing import factories as make
from chat.transcripts.forks import MAX_TOOL_RESULT_CHARS

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", ["", "OPENAI_API_KEY", "AGENTLAB_KEY_MISTRAL_2", "VLLM_KEY"])
def test_key_variable_names_that_are_accepted(name: str) -> None:
    assert key_variable_problem(name) is None


@pytest.mark.parametrize("name", ["sk-live-123", "lower_case", "2FAST", "WITH SPACE"])
def test_a_key_itself_is_not_a_variable_name(name: str) -> None:
    assert "environment variable" in (key_variable_problem(name) or "")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://api.openai.com/v1", None),
        ("http://vllm:8000/v1?api-version=2024", None),
        ("ftp://example.com/v1", "must start with http"),
        ("https://user:pw@example.com/v1", "carries credentials"),
        ("https://example.com/v1?api_key=abc", "in its query string"),
        ("https://example.com/v1?X-Auth-Token=abc", "in its query string"),
    ],
)
def test_base_url_rules(url: str, problem: str | None) -> None:
    found = base_url_problem(url)
    assert found is None if problem is None else problem in (found or "")


def test_the_profile_form_strips_and_saves_only_the_variable_name() -> None:
    form = ProviderProfileForm(
        data=make.profile_form(api_key_env="  VLLM_KEY ", base_url=" http://vllm:8000/v1 ")
    )
    assert form.is_valid(), form.errors
    saved = form.save()
    assert (saved.api_key_env, saved.base_url) == ("VLLM_KEY", "http://vllm:8000/v1")


def test_the_profile_form_refuses_a_key_in_either_field() -> None:
    form = ProviderProfileForm(
        data=make.profile_form(
            api_key_env="sk-abcdef", base_url="https://example.com/v1?key=sk-abcdef"
        )
    )
    assert not form.is_valid()
    assert set(form.errors) == {"api_key_env", "base_url"}
    assert not ProviderProfile.objects.exists()


def test_missing_key_warning_only_for_a_named_unset_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VLLM_KEY", raising=False)
    unset = ProviderProfile(name="a", api_key_env="VLLM_KEY")
    assert "VLLM_KEY is not set" in (missing_key_warning(unset) or "")
    monkeypatch.setenv("VLLM_KEY", "value")
    assert missing_key_warning(unset) is None
    assert missing_key_warning(ProviderProfile(name="b", api_key_env="")) is None
    assert missing_key_warning(None) is None


def test_the_settings_panel_saves_parameters_and_provider_together() -> None:
    conversation = make.conversation(make.user(), "panel")
    panel = AgentSettings(conversation, make.settings_form(), user=conversation.owner)
    assert panel.is_valid()
    panel.save()
    conversation.refresh_from_db()
    parameters = conversation.agent_parameters()
    assert parameters.temperature == 0.5 and parameters.max_event_loops == 4
    assert parameters.system_prompts == ("Be brief.",)
    assert [m.role for m in parameters.pre_messages] == ["assistant"]
    assert parameters.enabled_tools == ("handoff_note",)


def test_the_settings_panel_puts_each_rule_next_to_its_field() -> None:
    conversation = make.conversation(make.user(), "panel")
    panel = AgentSettings(
        conversation,
        make.settings_form(**{"agent-temperature": "3", "pre-0-role": "tool"}),
        user=conversation.owner,
    )
    assert not panel.is_valid()
    assert "temperature" in panel.form.errors
    assert conversation.agent_parameters().temperature is None

    # The panel offers only the roles a pre-message may have: not `tool`.
    panel = AgentSettings(
        conversation, make.settings_form(**{"pre-0-role": "tool"}), user=conversation.owner
    )
    assert "tool" not in dict(panel.pre_messages.forms[0].fields["role"].choices)  # type: ignore[attr-defined]
    assert not panel.is_valid()
    assert "Select a valid choice" in str(panel.pre_messages.forms[0].errors["role"])


def test_the_fork_form_bounds_the_edited_result() -> None:
    assert ToolForkForm({"result": "x" * MAX_TOOL_RESULT_CHARS}).is_valid()
    form = ToolForkForm({"result": "x" * (MAX_TOOL_RESULT_CHARS + 1)})
    assert not form.is_valid()
    assert "too long" in form.errors["result"][0]


def test_a_chosen_tool_not_available_here_is_shown_and_kept() -> None:
    owner = make.user()
    conversation = make.conversation(owner, "panel")
    conversation.parameters = {"enabled_tools": ["handoff_note", "module_tool"]}
    conversation.save()

    panel = AgentSettings(conversation, user=owner)
    tools = dict(panel.form.fields["enabled_tools"].choices)  # type: ignore[attr-defined]
    assert tools["module_tool"] == "Module tool (not available here)"
    assert panel.form.initial["enabled_tools"] == ["handoff_note", "module_tool"]

    kept = make.settings_form(**{"agent-enabled_tools": ["handoff_note", "module_tool"]})
    panel = AgentSettings(conversation, kept, user=owner)
    assert panel.is_valid(), panel.form.errors
    panel.save()
    conversation.refresh_from_db()
    assert conversation.parameters["enabled_tools"] == ["handoff_note", "module_tool"]

    # Unticking it is the user's choice; a tool nobody has cannot be newly chosen.
    panel = AgentSettings(conversation, make.settings_form(), user=owner)
    assert panel.is_valid()
    panel.save()
    conversation.refresh_from_db()
    assert conversation.parameters["enabled_tools"] == ["handoff_note"]
    made_up = make.settings_form(**{"agent-enabled_tools": ["never_was"]})
    assert not AgentSettings(conversation, made_up, user=owner).is_valid()
