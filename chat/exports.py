"""Transcripts as JSON Lines records and back, for export_transcripts and import_transcripts.

Two formats, one record per conversation:

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
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Annotated, Any, Final, Literal, Self

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models import Exists, Model, OuterRef, Prefetch, QuerySet
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from chat import agent, transcripts
from chat.agent import history
from chat.agent.messages import Role
from chat.models import (
    Conversation,
    HistoryRepair,
    Message,
    ModelCall,
    Run,
    RunStatus,
    ToolCall,
    ToolCallStatus,
)
from chat.runs import validation_text

FULL_FORMAT: Final = "agentlab.full"
FULL_VERSION: Final = 1
TITLE_CHARS = 60

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


class ModelCallRecord(_Record):
    step: Count
    model: str = ""
    url: str = ""
    request: dict[str, Any] = {}
    raw_stream: str = ""
    preflight: list[str] = []
    http_status: Count | None = None
    attempts: Count = 1
    finish_reason: str = ""
    prompt_tokens: Count = 0
    completion_tokens: Count = 0
    total_tokens: Count = 0
    time_to_first_token: float | None = None
    duration: float | None = None
    error: str = ""
    started_at: datetime


class RunRecord(_Record):
    created_by: str | None = None
    status: RunStatus
    model: str = ""
    parameters: dict[str, Any] = {}
    steps: Count = 0
    prompt_tokens: Count = 0
    completion_tokens: Count = 0
    total_tokens: Count = 0
    time_to_first_token: float | None = None
    duration: float | None = None
    error: str = ""
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
        if sum(run.status == RunStatus.IN_PROGRESS for run in self.runs) > 1:
            raise ValueError("runs: more than one run in progress")
        return self

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


def parse_since(text: str) -> datetime:
    """`YYYY-MM-DD` (the start of that day) or an ISO datetime, in the current time zone."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is not a date: use YYYY-MM-DD or an ISO datetime "
            "such as 2025-01-31T14:00:00+01:00"
        ) from None
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment


def user_named(name: str) -> AbstractBaseUser:
    """The user with this username; LookupError naming it when there is none."""
    User = get_user_model()
    try:
        return User._default_manager.get(**{User.USERNAME_FIELD: name})
    except User.DoesNotExist:
        raise LookupError(f"No user named {name!r}.") from None


def select(
    *,
    user: AbstractBaseUser | None = None,
    since: datetime | None = None,
    conversation: int | None = None,
) -> QuerySet[Conversation]:
    """Conversations to export: of a user, with activity since a moment, or one by id."""
    conversations = Conversation.objects.all()
    if user is not None:
        conversations = conversations.filter(owner=user)
    if since is not None:
        conversations = conversations.filter(updated_at__gte=since)
    if conversation is not None:
        conversations = conversations.filter(pk=conversation)
    return conversations


def for_export(conversations: QuerySet[Conversation], *, full: bool) -> QuerySet[Conversation]:
    """Conversations with what their records need fetched in a fixed number of queries."""
    active = Run.objects.filter(conversation=OuterRef("pk"), status=RunStatus.IN_PROGRESS)
    conversations = (
        conversations.select_related("owner")
        .annotate(has_active_run=Exists(active))
        .prefetch_related(Prefetch("messages", queryset=Message.objects.order_by("index")))
        .order_by("pk")
    )
    if not full:
        return conversations
    runs = Run.objects.select_related("created_by").prefetch_related(
        Prefetch("tool_calls", queryset=ToolCall.objects.order_by("step", "position", "id")),
        Prefetch("model_calls", queryset=ModelCall.objects.order_by("step", "id")),
    )
    return conversations.prefetch_related(
        Prefetch("runs", queryset=runs.order_by("started_at", "id")),
        Prefetch("history_repairs", queryset=HistoryRepair.objects.order_by("created_at", "id")),
    )


def request_messages(conversation: Conversation) -> list[agent.ChatMessage]:
    """What a run would send before the next user message: prompts, pre-messages, history."""
    parameters = conversation.agent_parameters()
    prompts = [agent.ChatMessage(role="system", content=text) for text in parameters.system_prompts]
    stored = transcripts.to_chat_messages(conversation.messages.all())
    return [*prompts, *parameters.pre_messages, *stored]


def tool_definitions(names: Iterable[str]) -> list[dict[str, Any]]:
    """The definitions of the named tools this registry has, as offered to a model."""
    return [definition.to_openai() for definition in agent.default_registry.definitions(names)]


def openai_record(conversation: Conversation) -> dict[str, Any]:
    """The conversation as one strict-valid Chat Completions request: messages and tools.

    `tools` is left out when no tool is enabled: strict endpoints reject an empty list. Raises
    ExportRefused when there is nothing to send or the stored history breaks the strict rules.
    """
    if not conversation.messages.all():
        raise NothingToExport("no messages")
    if getattr(conversation, "has_active_run", False):
        raise ExportRefused("a run is in progress; export it when it has finished")
    try:
        messages = request_messages(conversation)
    except ValidationError as exc:
        raise ExportRefused(f"invalid parameters: {validation_text(exc)}") from None
    violations = history.validate(messages)
    if violations:
        raise ExportRefused(
            f"the history breaks the strict rules ({len(violations)} violation(s), first: "
            f"{violations[0]}); run validate_transcripts --fix"
        )
    record: dict[str, Any] = {"messages": [message.to_openai() for message in messages]}
    tools = tool_definitions(conversation.agent_parameters().enabled_tools)
    if tools:
        record["tools"] = tools
    return record


def full_record(conversation: Conversation) -> dict[str, Any]:
    """Every field of the conversation and its rows (fetch them with `for_export(full=True)`)."""
    messages = list(conversation.messages.all())
    runs = list(conversation.runs.all())
    run_position = {run.pk: position for position, run in enumerate(runs)}
    message_index = {message.pk: message.index for message in messages}
    record = FullRecord(
        id=conversation.pk,
        owner=conversation.owner.get_username(),
        title=conversation.title,
        parameters=conversation.parameters or {},
        created_at=conversation.created_at,
        updated_at=conversation.updated_at,
        usage=Usage(
            prompt_tokens=sum(run.prompt_tokens for run in runs),
            completion_tokens=sum(run.completion_tokens for run in runs),
            total_tokens=sum(run.total_tokens for run in runs),
        ),
        tools=tool_definitions((conversation.parameters or {}).get("enabled_tools") or ()),
        messages=[
            MessageRecord(
                index=message.index,
                run=run_position.get(message.run_id) if message.run_id else None,
                role=message.role,
                content=message.content,
                reasoning=message.reasoning,
                tool_calls=message.tool_calls or [],
                tool_call_id=message.tool_call_id,
                created_at=message.created_at,
            )
            for message in messages
        ],
        runs=[_run_record(run, message_index) for run in runs],
        history_repairs=[
            HistoryRepairRecord(
                run=run_position.get(repair.run_id) if repair.run_id else None,
                reason=repair.reason,
                added=repair.added,
                removed=repair.removed,
                created_at=repair.created_at,
            )
            for repair in conversation.history_repairs.all()
        ],
    )
    return record.model_dump(mode="json")


def _run_record(run: Run, message_index: dict[int, int]) -> RunRecord:
    return RunRecord(
        created_by=run.created_by.get_username() if run.created_by else None,
        status=run.status,
        model=run.model,
        parameters=run.parameters or {},
        steps=run.steps,
        prompt_tokens=run.prompt_tokens,
        completion_tokens=run.completion_tokens,
        total_tokens=run.total_tokens,
        time_to_first_token=run.time_to_first_token,
        duration=run.duration,
        error=run.error,
        worker=run.worker,
        heartbeat_at=run.heartbeat_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        tool_calls=[
            ToolCallRecord(
                message=message_index.get(call.message_id) if call.message_id else None,
                step=call.step,
                position=call.position,
                call_id=call.call_id,
                name=call.name,
                arguments=call.arguments,
                status=call.status,
                result=call.result,
                error=call.error,
                started_at=call.started_at,
                finished_at=call.finished_at,
                duration=call.duration,
            )
            for call in run.tool_calls.all()
        ],
        model_calls=[
            ModelCallRecord(
                step=call.step,
                model=call.model,
                url=call.url,
                request=call.request or {},
                raw_stream=call.raw_stream,
                preflight=call.preflight or [],
                http_status=call.http_status,
                attempts=call.attempts,
                finish_reason=call.finish_reason,
                prompt_tokens=call.prompt_tokens,
                completion_tokens=call.completion_tokens,
                total_tokens=call.total_tokens,
                time_to_first_token=call.time_to_first_token,
                duration=call.duration,
                error=call.error,
                started_at=call.started_at,
            )
            for call in run.model_calls.all()
        ],
    )


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


def import_record(
    record: FullRecord | OpenAIRecord, *, user: AbstractBaseUser | None = None
) -> tuple[Conversation, list[str]]:
    """Write one record as a new conversation; returns it and warnings for the reader.

    A `full` record belongs to `user` if given, else to its owner by username; an `openai`
    record needs `user`. Raises ImportRefused, writing nothing, when it cannot be imported.
    """
    if isinstance(record, FullRecord):
        return _import_full(record, user=user)
    if user is None:
        raise ImportRefused("the openai format has no owner: pass --user")
    return _import_openai(record, user=user)


def _import_openai(
    record: OpenAIRecord, *, user: AbstractBaseUser
) -> tuple[Conversation, list[str]]:
    values = record.values()
    prompts: list[str] = []
    while values and values[0].role == "system":
        prompts.append(values.pop(0).content or "")
    if not values:
        raise ImportRefused("no message besides system prompts")
    violations = history.validate(values)
    if violations:
        raise ImportRefused(f"the history breaks the strict rules: {violations[0]}")
    names = record.tool_names()
    known = [name for name in names if name in agent.default_registry]
    warnings = []
    if len(known) < len(names):
        unknown = ", ".join(name for name in names if name not in agent.default_registry)
        warnings.append(f"tools not available here, left disabled: {unknown}")
    parameters = agent.AgentParameters(
        model=record.model or None, system_prompts=tuple(prompts), enabled_tools=tuple(known)
    )
    first_user = next((value.content for value in values if value.role == "user"), None)
    with transaction.atomic():
        conversation = Conversation(owner=user, title=_title(first_user or ""))
        conversation.set_agent_parameters(parameters)
        conversation.save()
        transcripts.append_messages(conversation, values)
    return conversation, warnings


def _import_full(
    record: FullRecord, *, user: AbstractBaseUser | None
) -> tuple[Conversation, list[str]]:
    users = _users({record.owner, *(run.created_by for run in record.runs if run.created_by)})
    owner = user or users.get(record.owner)
    if owner is None:
        raise ImportRefused(f"no user named {record.owner!r} (pass --user to choose the owner)")

    def created_by(name: str | None) -> AbstractBaseUser | None:
        if name is None:
            return None
        if name == record.owner:
            return owner
        if name not in users:
            raise ImportRefused(f"no user named {name!r} (a run's created_by)")
        return users[name]

    warnings = []
    violations = history.validate(record.history(), allow_trailing_pending=_active(record))
    if violations:
        warnings.append(
            f"the history breaks the strict rules ({violations[0]}); run validate_transcripts --fix"
        )
    with transaction.atomic():
        conversation = Conversation.objects.create(
            owner=owner, title=record.title, parameters=record.parameters
        )
        runs = Run.objects.bulk_create(
            Run(
                conversation=conversation,
                created_by=created_by(run.created_by),
                **run.model_dump(exclude={"created_by", "tool_calls", "model_calls"}),
            )
            for run in record.runs
        )
        _restore(runs, "started_at", [run.started_at for run in record.runs])
        messages = Message.objects.bulk_create(
            Message(
                conversation=conversation,
                run=runs[message.run] if message.run is not None else None,
                **message.model_dump(exclude={"run"}),
            )
            for message in record.messages
        )
        _restore(messages, "created_at", [message.created_at for message in record.messages])
        by_index = {message.index: message for message in messages}
        ToolCall.objects.bulk_create(
            ToolCall(
                run=row,
                message=by_index[call.message] if call.message is not None else None,
                **call.model_dump(exclude={"message"}),
            )
            for row, run in zip(runs, record.runs, strict=True)
            for call in run.tool_calls
        )
        model_calls = [call for run in record.runs for call in run.model_calls]
        model_call_rows = ModelCall.objects.bulk_create(
            ModelCall(run=row, **call.model_dump())
            for row, run in zip(runs, record.runs, strict=True)
            for call in run.model_calls
        )
        _restore(model_call_rows, "started_at", [call.started_at for call in model_calls])
        repairs = HistoryRepair.objects.bulk_create(
            HistoryRepair(
                conversation=conversation,
                run=runs[repair.run] if repair.run is not None else None,
                **repair.model_dump(exclude={"run"}),
            )
            for repair in record.history_repairs
        )
        _restore(repairs, "created_at", [repair.created_at for repair in record.history_repairs])
        Conversation.objects.filter(pk=conversation.pk).update(
            created_at=record.created_at, updated_at=record.updated_at
        )
    conversation.refresh_from_db()
    return conversation, warnings


def _active(record: FullRecord) -> bool:
    return any(run.status == RunStatus.IN_PROGRESS for run in record.runs)


def _restore(rows: Sequence[Model], field: str, values: Sequence[datetime]) -> None:
    """Put back timestamps that auto_now_add replaced with the time of the import."""
    for row, value in zip(rows, values, strict=True):
        setattr(row, field, value)
    if rows:
        type(rows[0])._default_manager.bulk_update(rows, [field], batch_size=500)


def _users(names: Iterable[str]) -> dict[str, AbstractBaseUser]:
    User = get_user_model()
    field = User.USERNAME_FIELD
    found = User._default_manager.filter(**{f"{field}__in": list(names)})
    return {user.get_username(): user for user in found}


def _title(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


def records(
    conversations: Iterable[Conversation], *, full: bool
) -> Iterator[tuple[Conversation, dict[str, Any] | ExportRefused]]:
    """Each conversation with its record, or why it has none (openai format only)."""
    for conversation in conversations:
        if full:
            yield conversation, full_record(conversation)
            continue
        try:
            yield conversation, openai_record(conversation)
        except ExportRefused as exc:
            yield conversation, exc
