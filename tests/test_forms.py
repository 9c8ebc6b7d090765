"""Tests of chat.forms: the settings panel validates through AgentParameters, the profile form
keeps keys out of the database, the fork form bounds an edited result."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from django.http import QueryDict

from chat.forms import (
    DEFAULT_EVENT_LOOPS,
    MAX_ROWS,
    ProviderProfileForm,
    ToolForkForm,
    base_url_problem,
    missing_key_warning,
)
from chat.formsets import row_edit
from chat.models import ProviderProfile
from chat.runs.providers import key_variable_problem
from chat.settings_panel import AgentSettings
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


def test_the_settings_panel_shows_every_default_as_a_placeholder() -> None:
    owner = make.user()
    conversation = make.conversation(owner, "panel")
    conversation.profile = ProviderProfile.objects.create(
        name="mistral",
        base_url="https://api.mistral.ai/v1",
        model="mistral-small-latest",
        available_to_everyone=True,
    )
    conversation.save()

    panel = AgentSettings(conversation, user=owner)
    html = str(panel.form)

    assert panel.form.initial["max_event_loops"] is None, "the default is not a value of its own"
    assert re.search(r'name="agent-model"[^>]*placeholder="mistral-small-latest"', html)
    for name in ("temperature", "top_p", "max_tokens"):
        assert re.search(rf'name="agent-{name}"[^>]*placeholder="provider default"', html)
    assert re.search(rf'name="agent-max_event_loops"[^>]*placeholder="{DEFAULT_EVENT_LOOPS}"', html)
    select = re.search(r'<select name="agent-profile"[^>]*>', html)
    assert select is not None and 'data-model-field="id_agent-model"' in select.group(0)
    defaults = re.search(r"data-default-models=\"([^\"]*)\"", select.group(0))
    assert defaults is not None
    assert json.loads(unescape(defaults.group(1))) == {
        "": "scripted",
        str(conversation.profile.pk): "mistral-small-latest",
    }


def test_an_empty_max_event_loops_is_the_server_default() -> None:
    conversation = make.conversation(make.user(), "panel", max_event_loops=12)
    empty = make.settings_form(**{"agent-max_event_loops": ""})
    panel = AgentSettings(conversation, empty, user=conversation.owner)
    assert panel.is_valid(), panel.form.errors
    panel.save()
    conversation.refresh_from_db()
    assert conversation.agent_parameters().max_event_loops == DEFAULT_EVENT_LOOPS
    assert "max_event_loops" not in conversation.parameters


def test_a_blank_row_only_when_there_is_none() -> None:
    owner = make.user()
    empty = AgentSettings(make.conversation(owner, "a"), user=owner)
    assert len(empty.system_prompts.forms) == 1 and len(empty.pre_messages.forms) == 1
    full = AgentSettings(make.conversation(owner, "b", system_prompts=["One", "Two"]), user=owner)
    assert [f.initial["content"] for f in full.system_prompts.forms] == ["One", "Two"]


def posted(**fields: str | list[str]) -> QueryDict:
    data = QueryDict(mutable=True)
    for name, value in fields.items():
        data.setlist(name, value if isinstance(value, list) else [value])
    return data


def test_removing_a_row_renumbers_the_rows_after_it() -> None:
    data = posted(
        **{
            "system-TOTAL_FORMS": "3",
            "system-INITIAL_FORMS": "2",
            "system-0-content": "a",
            "system-1-content": "b",
            "system-2-content": "c",
            "agent-enabled_tools": ["x", "y"],
            "remove": "system-1",
        }
    )
    edit = row_edit(data, MAX_ROWS)
    assert edit is not None and edit.added is None and edit.focus_add == "system"
    assert edit.data["system-TOTAL_FORMS"] == "2" and edit.data["system-INITIAL_FORMS"] == "1"
    assert (edit.data["system-0-content"], edit.data["system-1-content"]) == ("a", "c")
    assert "system-2-content" not in edit.data
    assert edit.data.getlist("agent-enabled_tools") == ["x", "y"]
    # A row that is not on the page changes nothing; another prefix is no row edit at all.
    stale = data.copy()
    stale["remove"] = "system-7"
    kept = row_edit(stale, MAX_ROWS)
    assert kept is not None and kept.data == stale
    stale["remove"] = "other-0"
    assert row_edit(stale, MAX_ROWS) is None


def test_adding_a_row_stops_at_the_limit() -> None:
    edit = row_edit(posted(**{"pre-TOTAL_FORMS": "2", "add": "pre"}), MAX_ROWS)
    assert edit is not None and edit.added == 2 and edit.data["pre-TOTAL_FORMS"] == "3"
    full = row_edit(posted(**{"pre-TOTAL_FORMS": str(MAX_ROWS["pre"]), "add": "pre"}), MAX_ROWS)
    assert full is not None and full.added is None
    assert full.data["pre-TOTAL_FORMS"] == str(MAX_ROWS["pre"])
    assert row_edit(posted(**{"pre-TOTAL_FORMS": "1"}), MAX_ROWS) is None
