"""The JSON Lines records of export_transcripts and import_transcripts, one per conversation:

- `openai`: `{"messages": [...], "tools": [...]}`, exactly what a strict Chat Completions endpoint
  accepts (replay, fine-tuning). System prompts and pre-messages come first, as a run sends them;
  a user message's files are its content parts as sent (`inline` reads them back).
- `full`: every field of the conversation, its versions, messages, runs, tool-call logs, model
  calls and history repairs, with original timestamps; users by username. Rows refer to each
  other by position (a message's run is its place in `runs`, its version its place in
  `versions`, null on the active path; a version's parent is another's place; a tool call's
  message is the message's `index` within `message_version`), so a record holds no database id
  but its own informational `id`, and an import exported again gives the same record. Format
  version 1 had no versions: its messages are all on the active path, and it still imports.
  A tool call carries its approval: the policy it ran under, the decision (who by username,
  when, the arguments after an edit, the reason); lines written before approvals have none.
  A user message's `attachments` carry each file's stored fields and its bytes in base64
  (`inline`); a message without files has no such key.

Both read messages with the one reader of the OpenAI shape (`messages`), within the same
bounds (`limits`).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from chat import agent
from chat.agent.contracts import validation_text
from chat.agent.messages import Role
from chat.models import Approval, Policy, Purpose, RunStatus, ToolCallStatus, ToolFailure
from chat.models.runs import ACTIVE

from .files import Admitted
from .inline import admitted_of, kept
from .limits import (
    PARTS,
    ROWS,
    Content,
    Count,
    Log,
    Name,
    Seconds,
    Text,
    Timestamp,
    at_most,
    folded,
    import_context,
    load_json,
    refusal_text,
)
from .messages import Attached, MessageToolCall, OpenAIMessages, chat_message, checked

FULL_FORMAT: Final = "agentlab.full"
FULL_VERSION: Final = 2

Total = Annotated[int, Field(ge=0)]


class ExportRefused(Exception):
    """A conversation cannot be written in the requested format; the text says why."""


class NothingToExport(ExportRefused):
    """The conversation has no message yet: not a failure, there is just nothing to write."""


class ImportRefused(Exception):
    """A record cannot be imported; the text says why. Nothing of it was written."""


class NoOwner(ImportRefused):
    """An openai-format record and no --user: the same reason for every such line."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VersionRecord(_Record):
    """An archived version: its parent's path (or the active) before `index`, then its own."""

    index: Count
    number: Annotated[Count, Field(ge=1)]
    parent: Count | None = None
    created_at: Timestamp


class MessageRecord(_Record):
    index: Count
    version: Count | None = None
    run: Count | None = None
    role: Role
    content: Content = None
    reasoning: Text = ""
    tool_calls: Annotated[list[MessageToolCall], PARTS] = []
    tool_call_id: Name = ""
    attachments: Attached = []
    created_at: Timestamp

    @model_validator(mode="after")
    def _is_a_chat_message(self, info: ValidationInfo) -> Self:
        self.attachments = kept(self.attachments, self.name, info)
        checked(self.value)
        return self

    def value(self) -> agent.ChatMessage:
        return chat_message(
            self.role,
            self.content,
            self.tool_calls,
            self.tool_call_id,
            self.reasoning,
            self.attachments,
        )

    @property
    def name(self) -> str:
        """How a refusal names it: by index, and by version when it is archived."""
        where = "" if self.version is None else f"versions.{self.version}, "
        return f"{where}message {self.index}"


class ToolCallRecord(_Record):
    message: Count | None = None
    message_version: Count | None = None
    step: Count = 0
    position: Count = 0
    call_id: Name
    name: Name
    arguments: Text = ""
    status: ToolCallStatus
    result: str = ""
    error: Text = ""
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None
    duration: Seconds | None = None
    server: Annotated[str, at_most(40)] = ""
    raw_result: Any = None
    failure: ToolFailure | Literal[""] = ""
    policy: Policy | Literal[""] = ""
    approval: Approval | Literal[""] = ""
    asked_at: Timestamp | None = None
    decided_at: Timestamp | None = None
    decided_by: Name | None = None
    """The decider's username; on import, the user of that name, else kept as the name."""
    edited_arguments: Text = ""
    decision_reason: Text = ""


class _Measured(_Record):
    prompt_tokens: Count = 0
    completion_tokens: Count = 0
    total_tokens: Count = 0
    time_to_first_token: Seconds | None = None
    duration: Seconds | None = None
    error: Text = ""


class ModelCallRecord(_Measured):
    step: Count
    model: Name = ""
    url: Annotated[str, at_most(500)] = ""
    request: dict[str, Any] = {}
    raw_stream: Log = ""
    preflight: Annotated[list[Text], PARTS] = []
    http_status: Count | None = None
    attempts: Count = 1
    finish_reason: Annotated[str, at_most(40)] = ""
    started_at: Timestamp


class RunRecord(_Measured):
    created_by: Name | None = None
    status: RunStatus
    model: Name = ""
    parameters: dict[str, Any] = {}
    steps: Count = 0
    worker: Name = ""
    heartbeat_at: Timestamp | None = None
    waiting_until: Timestamp | None = None
    started_at: Timestamp
    finished_at: Timestamp | None = None
    tool_calls: Annotated[list[ToolCallRecord], ROWS] = []
    model_calls: Annotated[list[ModelCallRecord], ROWS] = []


class HistoryRepairRecord(_Record):
    run: Count | None = None
    reason: Name
    added: Annotated[list[Any], ROWS] = []
    removed: Annotated[list[Any], ROWS] = []
    created_at: Timestamp


class Usage(_Record):
    prompt_tokens: Total = 0
    completion_tokens: Total = 0
    total_tokens: Total = 0


class FullRecord(_Record):
    """One conversation in the `full` format. `usage` and `tools` are derived, for readers."""

    format: Literal["agentlab.full"] = FULL_FORMAT
    version: Literal[1, 2] = FULL_VERSION
    id: int | None = None
    owner: Name
    title: Name = ""
    purpose: Purpose = Purpose.CHAT
    """A chat, or an evaluation's replay; lines written before it was recorded are chats."""
    agent: Name | None = None
    """The agent it started from, by name, and `agent_version` the number of that version;
    both null for the built-in Default (and in lines written before they were recorded)."""
    agent_version: Annotated[Count, Field(ge=1)] | None = None
    parameters: dict[str, Any] = {}
    created_at: Timestamp
    updated_at: Timestamp
    usage: Usage = Usage()
    tools: Annotated[list[dict[str, Any]], PARTS] = []
    versions: Annotated[list[VersionRecord], ROWS] = []
    messages: Annotated[list[MessageRecord], ROWS] = []
    runs: Annotated[list[RunRecord], ROWS] = []
    history_repairs: Annotated[list[HistoryRepairRecord], ROWS] = []

    @model_validator(mode="after")
    def _references_resolve(self) -> Self:
        agent.AgentParameters.from_stored(self.parameters)
        if (self.agent is None) != (self.agent_version is None):
            raise ValueError("agent and agent_version: give both (or neither, for Default)")
        self._versions_resolve()
        keys = [(message.version, message.index) for message in self.messages]
        if len(set(keys)) != len(keys):
            raise ValueError("messages: two messages of one path share an index")
        runs = len(self.runs)
        for message in self.messages:
            if message.run is not None and message.run >= runs:
                raise ValueError(f"{message.name}: no run {message.run}")
            version = message.version
            if version is not None and version >= len(self.versions):
                raise ValueError(f"{message.name}: no version {version}")
            if version is not None and message.index < self.versions[version].index:
                raise ValueError(f"{message.name}: before its version starts")
        for repair in self.history_repairs:
            if repair.run is not None and repair.run >= runs:
                raise ValueError(f"history repair: no run {repair.run}")
        known = set(keys)
        for position, run in enumerate(self.runs):
            for call in run.tool_calls:
                wanted = (call.message_version, call.message)
                if wanted != (None, None) and wanted not in known:
                    raise ValueError(f"runs.{position}: tool call {call.call_id!r}: no message")
        if len(self.runs_in_progress()) > 1:
            raise ValueError("runs: more than one run in progress or waiting for approval")
        return self

    def _versions_resolve(self) -> None:
        """Parents exist and start before their children (so make no loop); numbers are unique."""
        if self.version == 1 and self.versions:
            raise ValueError("versions need format version 2")
        places: set[tuple[int | None, int, int]] = set()
        for position, version in enumerate(self.versions):
            parent = version.parent
            if parent is not None and parent >= len(self.versions):
                raise ValueError(f"versions.{position}: no version {parent} (its parent)")
            if parent is not None and self.versions[parent].index >= version.index:
                raise ValueError(f"versions.{position}: its parent does not start before it")
            place = (parent, version.index, version.number)
            if place in places:
                raise ValueError(f"versions.{position}: another version has its number here")
            places.add(place)

    @model_validator(mode="after")
    def _long_results_folded(self, info: ValidationInfo) -> Self:
        for message in self.messages:
            if message.role == "tool" and message.content:
                where = f"{message.name}: tool result"
                message.content = folded(message.content, where, info)
        for position, run in enumerate(self.runs):
            for call in run.tool_calls:
                where = f"runs.{position}: tool call {call.call_id!r}: result"
                call.result = folded(call.result, where, info)
        return self

    def admitted(self) -> list[Admitted]:
        """The files its messages carry, as the gate admitted them on import."""
        return admitted_of([message.attachments for message in self.messages])

    def runs_in_progress(self) -> list[RunRecord]:
        """Runs not over: in progress, or waiting for approval (one at most, as stored)."""
        return [run for run in self.runs if run.status in ACTIVE]


class OpenAIRecord(BaseModel):
    """A Chat Completions request (or a fine-tuning line); keys other than these are ignored."""

    messages: OpenAIMessages
    tools: Annotated[list[dict[str, Any]], PARTS] = []
    model: Name | None = None

    def values(self) -> list[agent.ChatMessage]:
        return [message.value() for message in self.messages]

    def admitted(self) -> list[Admitted]:
        """The files its user messages carry, as the gate admitted them on import."""
        return admitted_of([[*m.attachments, *m.parts] for m in self.messages])

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


def parse_line(line: str) -> tuple[FullRecord | OpenAIRecord, list[str]]:
    """A JSON Lines line as a record of either format, read within the import bounds, and notes
    for the reader on what was folded; raises ImportRefused saying why not."""
    try:
        data = load_json(line)
    except ValueError as exc:
        raise ImportRefused(str(exc)) from None
    if not isinstance(data, dict):
        raise ImportRefused(f"a record must be a JSON object, not {type(data).__name__}")
    context = import_context()
    try:
        if "format" in data:
            record: FullRecord | OpenAIRecord = FullRecord.model_validate(data, context=context)
        else:
            record = OpenAIRecord.model_validate(data, context=context)
    except ValidationError as exc:
        raise ImportRefused(refusal_text(exc)) from None
    return record, list(context["notes"])
