"""Tests of chat.agent.contracts: the validated inputs of a run."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chat.agent.contracts import (
    MAX_EVENT_LOOPS,
    MAX_USER_MESSAGE_CHARS,
    AgentParameters,
    DebugRunRequest,
    validation_text,
)
from chat.agent.messages import ChatMessage, ToolCall
from chat.agent.tools import ToolDefinition, ToolRegistry


def request(**parameters: Any) -> dict[str, Any]:
    return {"parameters": parameters, "user_message": "hello"}


def only_error(info: pytest.ExceptionInfo[ValidationError]) -> dict[str, Any]:
    errors = info.value.errors()
    assert len(errors) == 1, errors
    return dict(errors[0])


# --- pre-message roles ----------------------------------------------------------------------


@pytest.mark.parametrize("role", ["developer", "function", "bot"])
def test_invalid_pre_message_role_rejected(role: str) -> None:
    data = request(pre_messages=[{"role": role, "content": "x"}])
    with pytest.raises(ValidationError) as info:
        DebugRunRequest.model_validate(data)
    error = only_error(info)
    assert error["loc"] == ("parameters", "pre_messages", 0, "role")
    assert error["type"] == "literal_error"


def test_tool_pre_message_rejected_naming_the_index() -> None:
    data = request(
        pre_messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "tool", "content": "{}", "tool_call_id": "call_1"},
        ]
    )
    with pytest.raises(ValidationError) as info:
        DebugRunRequest.model_validate(data)
    error = only_error(info)
    assert error["loc"] == ("parameters", "pre_messages")
    assert "pre_messages[2] has role 'tool'" in error["msg"]
    assert "system, user or assistant" in error["msg"]


def test_tool_pre_message_without_id_rejected_naming_the_index() -> None:
    data = request(pre_messages=[{"role": "user", "content": "hi"}, {"role": "tool"}])
    with pytest.raises(ValidationError) as info:
        DebugRunRequest.model_validate(data)
    error = only_error(info)
    assert error["loc"] == ("parameters", "pre_messages", 1)
    assert "tool_call_id" in error["msg"]


def test_pre_message_with_tool_calls_rejected_naming_the_index() -> None:
    call = {"id": "c", "name": "get_current_time", "arguments": "{}"}
    data = request(pre_messages=[{"role": "assistant", "tool_calls": [call]}])
    with pytest.raises(ValidationError) as info:
        DebugRunRequest.model_validate(data)
    assert "pre_messages[0] carries tool_calls" in only_error(info)["msg"]


def test_internal_tool_messages_still_valid() -> None:
    call = ToolCall(id="call_1", name="get_current_time")
    history = (
        ChatMessage(role="user", content="time?"),
        ChatMessage(role="assistant", tool_calls=(call,)),
        ChatMessage(role="tool", content='{"iso": "x"}', tool_call_id="call_1"),
    )
    run = DebugRunRequest(history=history, user_message="thanks")
    assert run.history == history
    assert [m.role for m in run.messages()] == ["user", "assistant", "tool", "user"]


def test_valid_pre_messages_accepted() -> None:
    params = AgentParameters.model_validate(
        {
            "pre_messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": "a"},
            ]
        }
    )
    assert [m.role for m in params.pre_messages] == ["system", "user", "assistant"]


# --- user message ---------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", " ", "\n\t  \n"])
def test_blank_user_message_rejected(text: str) -> None:
    with pytest.raises(ValidationError) as info:
        DebugRunRequest.model_validate({"user_message": text})
    error = only_error(info)
    assert error["loc"] == ("user_message",)
    assert "the message is empty" in error["msg"]


def test_missing_user_message_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        DebugRunRequest.model_validate({})
    assert only_error(info)["loc"] == ("user_message",)


def test_oversized_user_message_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        DebugRunRequest.model_validate({"user_message": "x" * (MAX_USER_MESSAGE_CHARS + 1)})
    error = only_error(info)
    assert error["loc"] == ("user_message",)
    assert f"the limit is {MAX_USER_MESSAGE_CHARS:,}" in error["msg"]


def test_the_limit_comes_from_the_validation_context() -> None:
    """The server's configured limit is the one rule: the core applies it, nobody else."""
    with pytest.raises(ValidationError, match=r"too long: 11 characters \(the limit is 10\)"):
        DebugRunRequest.model_validate(
            {"user_message": "x" * 11}, context={"max_message_chars": 10}
        )
    request = DebugRunRequest.model_validate(
        {"user_message": "x" * 10}, context={"max_message_chars": 10}
    )
    assert request.user_message == "x" * 10


def test_validation_text_is_one_line_per_field() -> None:
    with pytest.raises(ValidationError) as info:
        AgentParameters.model_validate({"temperature": 3, "enabled_tools": ["nope"]})
    text = validation_text(info.value)
    assert text.startswith("temperature: ")
    assert "; enabled_tools: unknown tool(s): nope" in text
    assert "Value error" not in text


def test_user_message_at_the_limit_accepted() -> None:
    text = "é" * MAX_USER_MESSAGE_CHARS
    assert DebugRunRequest(user_message=text).user_message == text


def test_unknown_request_field_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        DebugRunRequest.model_validate({"user_message": "hi", "temperature": 1})
    assert only_error(info)["type"] == "extra_forbidden"


# --- sampling parameters --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.1),
        ("temperature", 2.01),
        ("top_p", -0.01),
        ("top_p", 1.01),
        ("max_tokens", 0),
        ("max_tokens", -5),
        ("max_event_loops", 0),
        ("max_event_loops", MAX_EVENT_LOOPS + 1),
    ],
)
def test_out_of_range_parameter_rejected(field: str, value: float) -> None:
    assert MAX_EVENT_LOOPS == 50
    with pytest.raises(ValidationError) as info:
        DebugRunRequest.model_validate(request(**{field: value}))
    errors = info.value.errors()
    assert errors
    assert all(error["loc"][:2] == ("parameters", field) for error in errors)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 0),
        ("temperature", 2),
        ("top_p", 0),
        ("top_p", 1),
        ("max_tokens", 1),
        ("max_event_loops", 1),
        ("max_event_loops", 50),
        ("temperature", None),
    ],
)
def test_boundary_parameter_accepted(field: str, value: float | None) -> None:
    params = AgentParameters.model_validate({field: value})
    assert getattr(params, field) == value


def test_unknown_parameter_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        AgentParameters.model_validate({"temprature": 1})
    assert only_error(info)["type"] == "extra_forbidden"


def test_parameters_are_frozen() -> None:
    params = AgentParameters()
    with pytest.raises(ValidationError):
        params.temperature = 1  # type: ignore[misc]


# --- enabled tools --------------------------------------------------------------------------


def test_unknown_enabled_tool_rejected_naming_it() -> None:
    with pytest.raises(ValidationError) as info:
        DebugRunRequest.model_validate(
            request(enabled_tools=["get_current_time", "launch_rockets"])
        )
    error = only_error(info)
    assert error["loc"] == ("parameters", "enabled_tools")
    assert "launch_rockets" in error["msg"]
    assert "unknown tool" in error["msg"]
    assert "get_current_time" in error["msg"].split("known:")[1]


def test_default_tools_accepted_and_deduplicated() -> None:
    params = AgentParameters(enabled_tools=("handoff_note", "get_current_time", "handoff_note"))
    assert params.enabled_tools == ("handoff_note", "get_current_time")


def custom_registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(ToolDefinition(name="search_wiki", description="Search."), lambda a: [])
    return registry


def test_custom_registry_through_context() -> None:
    registry = custom_registry()
    data = request(enabled_tools=["search_wiki"])
    run = DebugRunRequest.model_validate(data, context={"registry": registry})
    assert run.parameters.enabled_tools == ("search_wiki",)


def test_custom_registry_tool_unknown_without_context() -> None:
    with pytest.raises(ValidationError, match="search_wiki"):
        DebugRunRequest.model_validate(request(enabled_tools=["search_wiki"]))


def test_custom_registry_replaces_the_default_one() -> None:
    with pytest.raises(ValidationError) as info:
        AgentParameters.model_validate(
            {"enabled_tools": ["get_current_time"]}, context={"registry": custom_registry()}
        )
    message = only_error(info)["msg"]
    assert "get_current_time" in message
    assert "known: search_wiki" in message


def test_empty_registry_lists_none_known() -> None:
    with pytest.raises(ValidationError, match=r"known: none"):
        AgentParameters.model_validate(
            {"enabled_tools": ["x"]}, context={"registry": ToolRegistry()}
        )


# --- messages() and to_json() ---------------------------------------------------------------


def test_messages_order() -> None:
    history = (
        ChatMessage(role="user", content="earlier"),
        ChatMessage(role="assistant", content="reply"),
    )
    run = DebugRunRequest(
        parameters=AgentParameters(
            system_prompts=("sys one", "sys two"),
            pre_messages=(
                ChatMessage(role="user", content="example q"),
                ChatMessage(role="assistant", content="example a"),
            ),
        ),
        history=history,
        user_message="now",
    )
    assert [(m.role, m.content) for m in run.messages()] == [
        ("system", "sys one"),
        ("system", "sys two"),
        ("user", "example q"),
        ("assistant", "example a"),
        ("user", "earlier"),
        ("assistant", "reply"),
        ("user", "now"),
    ]
    assert run.messages()[4] is history[0]


def test_messages_with_defaults_is_just_the_user_message() -> None:
    assert DebugRunRequest(user_message="hi").messages() == [ChatMessage(role="user", content="hi")]


def test_to_json_round_trips() -> None:
    params = AgentParameters(
        model="gpt-test",
        system_prompts=("be brief",),
        pre_messages=(ChatMessage(role="user", content="q"), ChatMessage(role="assistant")),
        temperature=0.5,
        top_p=0.9,
        max_tokens=256,
        max_event_loops=12,
        enabled_tools=("get_current_time",),
    )
    data = params.to_json()
    assert AgentParameters.model_validate(data) == params
    assert data["temperature"] == 0.5
    assert data["enabled_tools"] == ["get_current_time"]


def test_to_json_omits_defaults() -> None:
    assert AgentParameters().to_json() == {}
    assert AgentParameters(max_event_loops=3).to_json() == {"max_event_loops": 3}
    assert AgentParameters.model_validate(AgentParameters().to_json()) == AgentParameters()


def test_to_json_round_trips_with_custom_registry() -> None:
    registry = custom_registry()
    params = AgentParameters.model_validate(
        {"enabled_tools": ["search_wiki"]}, context={"registry": registry}
    )
    again = AgentParameters.model_validate(params.to_json(), context={"registry": registry})
    assert again == params


def test_a_tool_the_registry_withholds_is_valid_and_unavailable() -> None:
    registry = custom_registry()
    registry.withhold("docs__pid", "MCP server docs is unavailable: refused")

    parameters = AgentParameters.model_validate(
        {"enabled_tools": ["search_wiki", "docs__pid"]}, context={"registry": registry}
    )

    assert parameters.enabled_tools == ("search_wiki", "docs__pid")
    assert parameters.unavailable_tools(registry) == ("docs__pid",)
    with pytest.raises(ValidationError, match="docs__pid"):
        AgentParameters.model_validate(
            {"enabled_tools": ["docs__pid"]}, context={"registry": custom_registry()}
        )
