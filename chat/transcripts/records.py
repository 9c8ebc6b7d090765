"""The JSON Lines records of export_transcripts and import_transcripts, one per conversation.

Two formats:

- `openai`: `{"messages": [...], "tools": [...]}`, exactly what a strict Chat Completions endpoint
  accepts (replay, fine-tuning). System prompts and pre-messages come first, as a run sends them.
- `full`: every field of the conversation, its messages, runs, tool-call logs, model calls and
  history repairs, with original timestamps; users by username. Rows refer to each other by
  position (a message's run is its place in `runs`, a tool call's message is the message's
  `index`), so a record holds no database id but its own informational `id`, and an import
  exported again gives the same record.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from chat import agent
from chat.agent.contracts import validation_text
from chat.agent.messages import Role
from chat.models import RunStatus, ToolCallStatus

FULL_FORMAT: Final = "agentlab.full"
FULL_VERSION: Final = 1

Count = Annotated[int, Field(ge=0)]


class ExportRefused(Exception):
    """A conversation cannot be written in the requested format; the text says why."""


class NothingToExport(ExportRefused):
    """The conversation has no message yet: not a failure, there is just nothing to write."""


class ImportRefused(Exception):
    """A record cannot be imported; the text says why. Nothing of it was written."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MessageRecord(_Record):
    index: Count
    run: Count | None = None
    role: Role
    content: str | None = None
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = []
    tool_call_id: str = ""
    created_at: datetime

    @model_validator(mode="after")
    def _is_a_chat_message(self) -> Self:
        self.value()
        return self

    def value(self) -> agent.ChatMessage:
        return agent.ChatMessage(
            role=self.role,
            content=self.content,
            tool_calls=tuple(agent.ToolCall.from_openai(call) for call in self.tool_calls),
            tool_call_id=self.tool_call_id or None,
            reasoning=self.reasoning or None,
        )


class ToolCallRecord(_Record):
    message: Count | None = None
    step: Count = 0
    position: Count = 0
    call_id: str
    name: str
    arguments: str = ""
    status: ToolCallStatus
    result: str = ""
    error: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration: float | None = None


class _Measured(_Record):
    prompt_tokens: Count = 0
    completion_tokens: Count = 0
    total_tokens: Count = 0
    time_to_first_token: float | None = None
    duration: float | None = None
    error: str = ""


class ModelCallRecord(_Measured):
    step: Count
    model: str = ""
    url: str = ""
    request: dict[str, Any] = {}
    raw_stream: str = ""
    preflight: list[str] = []
    http_status: Count | None = None
    attempts: Count = 1
    finish_reason: str = ""
    started_at: datetime


class RunRecord(_Measured):
    created_by: str | None = None
    status: RunStatus
    model: str = ""
    parameters: dict[str, Any] = {}
    steps: Count = 0
    worker: str = ""
    heartbeat_at: datetime | None = None
    started_at: datetime
    finished_at: datetime | None = None
    tool_calls: list[ToolCallRecord] = []
    model_calls: list[ModelCallRecord] = []


class HistoryRepairRecord(_Record):
    run: Count | None = None
    reason: str
    added: list[Any] = []
    removed: list[Any] = []
    created_at: datetime


class Usage(_Record):
    prompt_tokens: Count = 0
    completion_tokens: Count = 0
    total_tokens: Count = 0


class FullRecord(_Record):
    """One conversation in the `full` format. `usage` and `tools` are derived, for readers."""

    format: Literal["agentlab.full"] = FULL_FORMAT
    version: Literal[1] = FULL_VERSION
    id: int | None = None
    owner: str
    title: str = ""
    parameters: dict[str, Any] = {}
    created_at: datetime
    updated_at: datetime
    usage: Usage = Usage()
    tools: list[dict[str, Any]] = []
    messages: list[MessageRecord] = []
    runs: list[RunRecord] = []
    history_repairs: list[HistoryRepairRecord] = []

    @model_validator(mode="after")
    def _references_resolve(self) -> Self:
        agent.AgentParameters.model_validate(self.parameters)
        indexes = [message.index for message in self.messages]
        if len(set(indexes)) != len(indexes):
            raise ValueError("messages: two messages share an index")
        runs = len(self.runs)
        for message in self.messages:
            if message.run is not None and message.run >= runs:
                raise ValueError(f"message {message.index}: no run {message.run}")
        for repair in self.history_repairs:
            if repair.run is not None and repair.run >= runs:
                raise ValueError(f"history repair: no run {repair.run}")
        known = set(indexes)
        for position, run in enumerate(self.runs):
            for call in run.tool_calls:
                if call.message is not None and call.message not in known:
                    raise ValueError(f"runs.{position}: tool call {call.call_id!r}: no message")
        if len(self.runs_in_progress()) > 1:
            raise ValueError("runs: more than one run in progress")
        return self

    def runs_in_progress(self) -> list[RunRecord]:
        return [run for run in self.runs if run.status == RunStatus.IN_PROGRESS]

    def history(self) -> list[agent.ChatMessage]:
        return [message.value() for message in sorted(self.messages, key=lambda m: m.index)]


class OpenAIRecord(BaseModel):
    """A Chat Completions request (or a fine-tuning line); keys other than these are ignored."""

    messages: Annotated[list[dict[str, Any]], Field(min_length=1)]
    tools: list[dict[str, Any]] = []
    model: str | None = None

    def values(self) -> list[agent.ChatMessage]:
        result = []
        for position, data in enumerate(self.messages):
            try:
                result.append(agent.ChatMessage.from_openai(data))
            except ValueError as exc:
                raise ImportRefused(f"messages.{position}: {validation_text(exc)}") from None
        return result

    def tool_names(self) -> list[str]:
        names = []
        for position, tool in enumerate(self.tools):
            function = tool.get("function")
            if tool.get("type") != "function" or not isinstance(function, dict):
                raise ImportRefused(f"tools.{position}: not a function tool")
            try:
                definition = agent.ToolDefinition.model_validate({"description": "", **function})
                names.append(definition.name)
            except ValidationError as exc:
                raise ImportRefused(f"tools.{position}: {validation_text(exc)}") from None
        return names


def parse_line(line: str) -> FullRecord | OpenAIRecord:
    """A JSON Lines line as a record of either format; raises ImportRefused saying why not."""
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise ImportRefused(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ImportRefused(f"a record must be a JSON object, not {type(data).__name__}")
    try:
        if "format" in data:
            return FullRecord.model_validate(data)
        return OpenAIRecord.model_validate(data)
    except ValidationError as exc:
        raise ImportRefused(validation_text(exc)) from None
