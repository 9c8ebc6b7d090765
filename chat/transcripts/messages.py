"""The one reader of a message in the OpenAI shape, whichever way it comes in: a transcript
line (`records`) or a case line (`chat.evals.cases`). Text content parts are joined with a blank
line, any other part is refused (`limits.Content`), tool calls keep their raw `arguments`, and
the core's own rules apply (`agent.ChatMessage`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from chat import agent
from chat.agent.contracts import validation_text
from chat.agent.messages import Role

from .limits import PARTS, ROWS, Content, Name, Text, folded


class ToolCallFunction(BaseModel):
    """The function a tool call names; `arguments` is the raw JSON string (an object, which some
    exporters write, is kept as its JSON text, as the core does)."""

    name: Name
    arguments: Text = ""

    @field_validator("arguments", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> Any:
        return json.dumps(value) if isinstance(value, dict | list) else value


class MessageToolCall(BaseModel):
    """A tool call in a message, in the OpenAI shape: `{id, type: "function", function}`."""

    id: Name
    type: Literal["function"] = "function"
    function: ToolCallFunction

    def value(self) -> agent.ToolCall:
        return agent.ToolCall(
            id=self.id, name=self.function.name, arguments=self.function.arguments
        )


def checked(value: Callable[[], agent.ChatMessage]) -> None:
    """The core's own rules (which role carries tool calls...), as one line per error."""
    try:
        value()
    except ValidationError as exc:
        raise ValueError(validation_text(exc)) from None


def chat_message(
    role: Role,
    content: str | None,
    tool_calls: Iterable[MessageToolCall],
    tool_call_id: str | None,
    reasoning: str | None,
) -> agent.ChatMessage:
    """The core value of a message of either format; empty strings mean "none"."""
    return agent.ChatMessage(
        role=role,
        content=content,
        tool_calls=tuple(call.value() for call in tool_calls),
        tool_call_id=tool_call_id or None,
        reasoning=reasoning or None,
    )


class OpenAIMessage(BaseModel):
    """A message in the OpenAI shape. Keys the core has no place for are ignored, unless they
    carry what the message says (a refusal, a legacy function_call, audio): those are refused,
    as an emptied message would pass for what the model said."""

    role: Role
    content: Content = None
    tool_calls: Annotated[list[MessageToolCall] | None, PARTS] = None
    tool_call_id: Name | None = None
    reasoning_content: Text | None = None
    reasoning: Text | None = None
    refusal: Any = None
    function_call: Any = None
    audio: Any = None

    @model_validator(mode="after")
    def _is_a_chat_message(self) -> Self:
        if self.refusal:
            raise ValueError("refusal is not supported: the core keeps no refusal")
        if self.function_call:
            raise ValueError("function_call (the legacy shape) is not supported: use tool_calls")
        if self.audio:
            raise ValueError("audio is not supported: the core's content is text")
        checked(self.value)
        return self

    def value(self) -> agent.ChatMessage:
        reasoning = self.reasoning_content or self.reasoning
        return chat_message(
            self.role, self.content, self.tool_calls or (), self.tool_call_id, reasoning
        )


def _results_folded(messages: list[OpenAIMessage], info: ValidationInfo) -> list[OpenAIMessage]:
    for position, message in enumerate(messages):
        if message.role == "tool" and message.content:
            where = f"messages.{position}: tool result"
            message.content = folded(message.content, where, info)
    return messages


OpenAIMessages = Annotated[
    list[OpenAIMessage], Field(min_length=1), ROWS, AfterValidator(_results_folded)
]
"""A history in the OpenAI shape, as every import reads it (a transcript line, a case line):
one reader, so a message means the same thing whichever way it came in."""
