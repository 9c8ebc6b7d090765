"""Conversations as records: which ones, fetched how, and each in either format."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from django.db.models import Model
from pydantic import BaseModel, ValidationError

from chat import agent
from chat.agent import history
from chat.agent.contracts import validation_text
from chat.models import Conversation, ConversationQuerySet, Run

from .records import (
    ExportRefused,
    FullRecord,
    HistoryRepairRecord,
    MessageRecord,
    ModelCallRecord,
    NothingToExport,
    RunRecord,
    ToolCallRecord,
    Usage,
)
from .rows import to_chat_messages


def select(
    *,
    user: Any = None,
    since: datetime | None = None,
    conversation: int | None = None,
) -> ConversationQuerySet:
    """Conversations to export: of a user, with activity since a moment, or one by id."""
    conversations = Conversation.objects.all()
    if user is not None:
        conversations = conversations.filter(owner=user)
    if since is not None:
        conversations = conversations.filter(updated_at__gte=since)
    if conversation is not None:
        conversations = conversations.filter(pk=conversation)
    return conversations


def request_messages(conversation: Conversation) -> list[agent.ChatMessage]:
    """What a run would send before the next user message: prompts, pre-messages, history."""
    parameters = conversation.agent_parameters()
    prompts = [agent.ChatMessage(role="system", content=text) for text in parameters.system_prompts]
    stored = to_chat_messages(conversation.messages.all())
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
            _record(MessageRecord, message, run=_position(run_position, message.run_id))
            for message in messages
        ],
        runs=[_run_record(run, message_index) for run in runs],
        history_repairs=[
            _record(HistoryRepairRecord, repair, run=_position(run_position, repair.run_id))
            for repair in conversation.history_repairs.all()
        ],
    )
    return record.model_dump(mode="json")


def _run_record(run: Run, message_index: dict[int, int]) -> RunRecord:
    return _record(
        RunRecord,
        run,
        created_by=run.created_by.get_username() if run.created_by else None,
        tool_calls=[
            _record(ToolCallRecord, call, message=_position(message_index, call.message_id))
            for call in run.tool_calls.all()
        ],
        model_calls=[_record(ModelCallRecord, call) for call in run.model_calls.all()],
    )


def _position(positions: dict[int, int], pk: int | None) -> int | None:
    return None if pk is None else positions.get(pk)


def _record[R: BaseModel](kind: type[R], row: Model, **references: Any) -> R:
    """A record of a row: its fields by name, with `references` (positions, usernames) instead
    of database ids."""
    fields = {name: getattr(row, name) for name in kind.model_fields if name not in references}
    return kind.model_validate({**fields, **references})


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
