"""The one reader of a message in the OpenAI shape, whichever way it comes in: a transcript
line (`records`) or a case line (`chat.evals.cases`). Text content parts are joined with a blank
line; on import a user message's image and attached-file parts become its attachments through
the gate (`inline`), any other part is refused (`limits.Content`). Tool calls keep their raw
`arguments`, and the core's own rules apply (`agent.ChatMessage`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from chat import agent
from chat.agent.contracts import validation_text
from chat.agent.messages import Role

from .files import check_count
from .inline import AttachmentRecord, InlineFile, counted, kept, split_parts
from .limits import PARTS, ROWS, Content, Name, Text, folded, importing


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
    attached: Iterable[InlineFile] = (),
) -> agent.ChatMessage:
    """The core value of a message of either format; empty strings mean "none"."""
    return agent.ChatMessage(
        role=role,
        content=content,
        tool_calls=tuple(call.value() for call in tool_calls),
        tool_call_id=tool_call_id or None,
        reasoning=reasoning or None,
        attachments=tuple(item.value() for item in attached),
    )


Attached = Annotated[list[AttachmentRecord], BeforeValidator(counted)]
"""A message's files as a full or case line carries them (the bytes inline on the way in)."""


class OpenAIMessage(BaseModel):
    """A message in the OpenAI shape. Keys the core has no place for are ignored, unless they
    carry what the message says (a refusal, a legacy function_call, audio): those are refused,
    as an emptied message would pass for what the model said.

    `attachments` is a case's shape (stored values; their bytes inline in a line); `parts` is
    filled from an imported user message's content parts, never read from the line.
    """

    role: Role
    content: Content = None
    attachments: Attached = []
    parts: list[InlineFile] = []
    tool_calls: Annotated[list[MessageToolCall] | None, PARTS] = None
    tool_call_id: Name | None = None
    reasoning_content: Text | None = None
    reasoning: Text | None = None
    refusal: Any = None
    function_call: Any = None
    audio: Any = None

    @model_validator(mode="before")
    @classmethod
    def _files_out_of_parts(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        content = data.get("content")
        parts: list[dict[str, Any]] = []
        if importing(info) and data.get("role") == "user" and isinstance(content, list):
            content, parts = split_parts(content)
        given = data.get("attachments")
        check_count((len(given) if isinstance(given, list) else 0) + len(parts))
        return {**data, "content": content, "parts": parts}

    @model_validator(mode="after")
    def _is_a_chat_message(self, info: ValidationInfo) -> Self:
        self.attachments = kept(self.attachments, "a user message", info)
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
            self.role,
            self.content,
            self.tool_calls or (),
            self.tool_call_id,
            reasoning,
            [*self.attachments, *self.parts],
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
