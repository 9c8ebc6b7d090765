"""Tests of chat.agent.messages: ChatMessage and ToolCall validation and the OpenAI shape."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chat.agent.messages import ROLES, ChatMessage, ToolCall

CALL = ToolCall(id="call_1", name="get_current_time", arguments='{"timezone": "UTC"}')


def tool_call_only() -> ChatMessage:
    return ChatMessage(role="assistant", tool_calls=(CALL,), reasoning="I should check the time")


# --- roles and fields -----------------------------------------------------------------------


def test_roles_are_the_four_chat_completions_roles() -> None:
    assert ROLES == ("system", "user", "assistant", "tool")


@pytest.mark.parametrize("role", ["developer", "function", "", "User"])
def test_invalid_role_rejected(role: str) -> None:
    with pytest.raises(ValidationError) as info:
        ChatMessage.model_validate({"role": role, "content": "hi"})
    [error] = info.value.errors()
    assert error["loc"] == ("role",)
    assert error["type"] == "literal_error"
    assert "'system', 'user', 'assistant' or 'tool'" in error["msg"]


@pytest.mark.parametrize("role", ["developer", "function"])
def test_invalid_role_rejected_by_from_openai(role: str) -> None:
    with pytest.raises(ValidationError, match="role"):
        ChatMessage.from_openai({"role": role, "content": "hi"})


def test_missing_role_rejected() -> None:
    with pytest.raises(ValidationError, match="role"):
        ChatMessage.from_openai({"content": "hi"})


@pytest.mark.parametrize("role", ["system", "user", "assistant"])
def test_plain_roles_valid(role: str) -> None:
    message = ChatMessage.model_validate({"role": role, "content": "hi"})
    assert (message.role, message.content) == (role, "hi")


def test_tool_message_without_tool_call_id_rejected() -> None:
    with pytest.raises(ValidationError, match="tool message needs the tool_call_id"):
        ChatMessage(role="tool", content="{}")


def test_tool_message_with_empty_tool_call_id_rejected() -> None:
    with pytest.raises(ValidationError, match="tool_call_id"):
        ChatMessage(role="tool", content="{}", tool_call_id="")


def test_internally_created_tool_message_valid() -> None:
    message = ChatMessage(role="tool", tool_call_id="call_1")
    assert message.role == "tool"
    assert message.tool_call_id == "call_1"
    assert message.content is None


@pytest.mark.parametrize("role", ["system", "user", "tool"])
def test_tool_calls_on_non_assistant_rejected(role: str) -> None:
    extra = {"tool_call_id": "call_0"} if role == "tool" else {}
    with pytest.raises(ValidationError, match=f"only assistant messages carry tool_calls.*{role}"):
        ChatMessage.model_validate({"role": role, "tool_calls": [CALL], **extra})


@pytest.mark.parametrize("role", ["system", "user", "assistant"])
def test_tool_call_id_on_non_tool_rejected(role: str) -> None:
    with pytest.raises(ValidationError, match=f"only tool messages carry a tool_call_id.*{role}"):
        ChatMessage.model_validate({"role": role, "content": "x", "tool_call_id": "call_1"})


def test_messages_and_calls_are_frozen() -> None:
    message = ChatMessage(role="user", content="hi")
    with pytest.raises(ValidationError):
        message.content = "changed"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        CALL.name = "other"  # type: ignore[misc]


# --- to_openai ------------------------------------------------------------------------------


def test_tool_call_to_openai() -> None:
    assert CALL.to_openai() == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_current_time", "arguments": '{"timezone": "UTC"}'},
    }


@pytest.mark.parametrize("role", ["system", "user", "assistant"])
def test_plain_message_to_openai(role: Any) -> None:
    assert ChatMessage(role=role, content="hello").to_openai() == {
        "role": role,
        "content": "hello",
    }


def test_to_openai_never_emits_empty_tool_calls() -> None:
    for empty_content in ("empty", "null", "omit"):
        data = ChatMessage(role="assistant", content="hi").to_openai(empty_content=empty_content)
        assert "tool_calls" not in data
        assert data["content"] == "hi"


def test_to_openai_never_emits_internal_fields() -> None:
    message = ChatMessage(role="assistant", content="answer", reasoning="secret thoughts")
    data = message.to_openai()
    assert data == {"role": "assistant", "content": "answer"}
    assert "secret thoughts" not in repr(tool_call_only().to_openai())
    assert "reasoning" not in tool_call_only().to_openai()
    assert "reasoning_content" not in tool_call_only().to_openai()


def test_assistant_none_content_without_calls_becomes_empty_string() -> None:
    assert ChatMessage(role="assistant").to_openai() == {"role": "assistant", "content": ""}


def test_tool_call_only_empty_content_default_is_empty_string() -> None:
    data = tool_call_only().to_openai()
    assert data == {
        "role": "assistant",
        "content": "",
        "tool_calls": [CALL.to_openai()],
    }


def test_tool_call_only_empty_content_null() -> None:
    data = tool_call_only().to_openai(empty_content="null")
    assert "content" in data
    assert data["content"] is None
    assert data["tool_calls"] == [CALL.to_openai()]


def test_tool_call_only_empty_content_omit() -> None:
    data = tool_call_only().to_openai(empty_content="omit")
    assert "content" not in data
    assert data == {"role": "assistant", "tool_calls": [CALL.to_openai()]}


@pytest.mark.parametrize("empty_content", ["empty", "null", "omit"])
def test_tool_calls_with_text_keep_the_text(empty_content: Any) -> None:
    message = ChatMessage(role="assistant", content="Let me check.", tool_calls=(CALL,))
    data = message.to_openai(empty_content=empty_content)
    assert data["content"] == "Let me check."
    assert len(data["tool_calls"]) == 1


def test_tool_message_to_openai() -> None:
    message = ChatMessage(role="tool", content='{"ok": true}', tool_call_id="call_1")
    assert message.to_openai() == {
        "role": "tool",
        "content": '{"ok": true}',
        "tool_call_id": "call_1",
    }


def test_tool_message_without_content_sends_empty_string() -> None:
    data = ChatMessage(role="tool", tool_call_id="call_1").to_openai()
    assert data == {"role": "tool", "content": "", "tool_call_id": "call_1"}


# --- from_openai ----------------------------------------------------------------------------


def test_tool_call_from_openai() -> None:
    call = ToolCall.from_openai(
        {"id": "c", "type": "function", "function": {"name": "n", "arguments": "{}"}}
    )
    assert call == ToolCall(id="c", name="n", arguments="{}")


def test_tool_call_from_openai_missing_parts_become_empty_strings() -> None:
    assert ToolCall.from_openai({}) == ToolCall(id="", name="", arguments="")
    assert ToolCall.from_openai({"id": None, "function": None}) == ToolCall(id="", name="")


@pytest.mark.parametrize(
    "message",
    [
        ChatMessage(role="system", content="be brief"),
        ChatMessage(role="user", content="hi"),
        ChatMessage(role="assistant", content="hello"),
        ChatMessage(role="assistant", content="Checking.", tool_calls=(CALL,)),
        ChatMessage(
            role="assistant",
            content="two",
            tool_calls=(CALL, ToolCall(id="call_2", name="handoff_note", arguments="{}")),
        ),
        ChatMessage(role="tool", content='{"iso": "now"}', tool_call_id="call_1"),
    ],
)
def test_from_openai_round_trip(message: ChatMessage) -> None:
    data = message.to_openai()
    assert ChatMessage.from_openai(data) == message
    assert ChatMessage.from_openai(data).to_openai() == data


@pytest.mark.parametrize("empty_content", ["empty", "null", "omit"])
def test_tool_call_only_round_trip_keeps_the_wire_shape(empty_content: Any) -> None:
    message = ChatMessage(role="assistant", tool_calls=(CALL,))
    data = message.to_openai(empty_content=empty_content)
    back = ChatMessage.from_openai(data)
    assert back.tool_calls == (CALL,)
    assert not back.content
    assert back.to_openai(empty_content=empty_content) == data


def test_tool_call_only_round_trip_with_null_is_exact() -> None:
    message = ChatMessage(role="assistant", tool_calls=(CALL,))
    assert ChatMessage.from_openai(message.to_openai(empty_content="null")) == message


def test_from_openai_reads_reasoning_but_does_not_send_it_back() -> None:
    message = ChatMessage.from_openai(
        {"role": "assistant", "content": "hi", "reasoning_content": "thinking"}
    )
    assert message.reasoning == "thinking"
    assert message.to_openai() == {"role": "assistant", "content": "hi"}
    assert ChatMessage.from_openai({"role": "assistant", "reasoning": "r"}).reasoning == "r"


def test_from_openai_joins_content_parts() -> None:
    message = ChatMessage.from_openai(
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world"}],
        }
    )
    assert message.content == "Hello, world"


def test_from_openai_null_tool_calls_are_none() -> None:
    message = ChatMessage.from_openai({"role": "assistant", "content": "x", "tool_calls": None})
    assert message.tool_calls == ()


def test_from_openai_tool_without_id_rejected() -> None:
    with pytest.raises(ValidationError, match="tool_call_id"):
        ChatMessage.from_openai({"role": "tool", "content": "{}"})


def test_from_openai_tool_calls_on_user_rejected() -> None:
    with pytest.raises(ValidationError, match="only assistant messages carry tool_calls"):
        ChatMessage.from_openai({"role": "user", "content": "x", "tool_calls": [CALL.to_openai()]})
