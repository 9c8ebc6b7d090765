"""Conversations as records: which ones, fetched how, and each in either format."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from django.db.models import Model
from pydantic import BaseModel, ValidationError

from chat import agent
from chat.agent import history
from chat.agent.contracts import validation_text
from chat.models import (
    Conversation,
    ConversationQuerySet,
    McpTool,
    Message,
    ModelCall,
    Run,
    Version,
)

from . import attachments, inline, versions
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
    VersionRecord,
)
from .rows import to_chat_messages


def select(
    *,
    user: Any = None,
    since: datetime | None = None,
    conversation: int | None = None,
    include_replays: bool = False,
) -> ConversationQuerySet:
    """Conversations to export: of a user, with activity since a moment, or one by id.

    Evaluation replays only with `include_replays`: they are not what people said to an agent,
    and data made from chats (fine-tuning above all) must not take them in unawares.
    """
    # Each record names the agent version its conversation started from: no query per line.
    everything = Conversation.objects.select_related("agent_version__agent")
    conversations = everything if include_replays else everything.chats()
    if user is not None:
        conversations = conversations.filter(owner=user)
    if since is not None:
        conversations = conversations.filter(updated_at__gte=since)
    if conversation is not None:
        conversations = conversations.filter(pk=conversation)
    return conversations


CHUNK = 100
"""Conversations an export fetches at a time, each with all its rows."""


def in_chunks(
    conversations: ConversationQuerySet, size: int | None = None
) -> Iterator[Conversation]:
    """Every conversation of `conversations` in pk order, fetched `size` at a time with their
    prefetches: an export of any length holds one chunk of rows, never the whole result.

    Pages on pk (keyset), not a server-side cursor: each page is a short query of its own, so a
    long export holds no transaction, cursor or snapshot open, and works behind a pooler too.
    """
    size = size or CHUNK
    ordered = conversations.order_by("pk")
    chunk = list(ordered[:size])
    while chunk:
        yield from chunk
        if len(chunk) < size:
            return
        last = chunk[-1].pk
        chunk.clear()  # let the rows go before the next chunk is fetched
        chunk = list(ordered.filter(pk__gt=last)[:size])


def active_rows(conversation: Conversation) -> list[Message]:
    """The active path, of the messages `for_export` fetched (all of them, or the active ones)."""
    return [row for row in conversation.messages.all() if row.version_id is None]


def request_messages(
    conversation: Conversation, rows: Iterable[Message] | None = None
) -> list[agent.ChatMessage]:
    """What a run on a path (the active one unless `rows` are given) would send before the next
    user message: prompts, pre-messages, history."""
    parameters = conversation.agent_parameters()
    prompts = [agent.ChatMessage(role="system", content=text) for text in parameters.system_prompts]
    stored = to_chat_messages(active_rows(conversation) if rows is None else rows)
    return [*prompts, *parameters.pre_messages, *stored]


def tool_definitions(names: Iterable[str]) -> list[dict[str, Any]]:
    """The definitions of the named tools, as offered to a model: built-in ones from this
    registry, MCP ones as their servers last listed them."""
    names = list(names)
    built_in = set(agent.default_registry.built_in_names())
    chosen = agent.default_registry.definitions(name for name in names if name in built_in)
    offered = [*chosen, *McpTool.objects.definitions(names)]
    return [definition.to_openai() for definition in offered]


def openai_record(conversation: Conversation, path: versions.Path | None = None) -> dict[str, Any]:
    """The conversation's active path, or `path`, as one strict-valid Chat Completions request:
    messages and tools, and `purpose` (chat or eval) to drop before sending it. A user
    message's files are its content parts as a request sends them (images as data URLs).

    `tools` is left out when no tool is enabled: strict endpoints reject an empty list. Raises
    ExportRefused when there is nothing to send or the stored history breaks the strict rules.
    A run in progress changes only the active path: archived versions still export.
    """
    messages, record = _openai(conversation, path)
    return {"messages": [_sent(message) for message in messages], **record}


def openai_text(conversation: Conversation, path: versions.Path | None = None) -> Iterator[str]:
    """`openai_record` as its JSON text in pieces, each message's files read as it is written.
    Raises ExportRefused as `openai_record` does, before the first piece."""
    messages, record = _openai(conversation, path)
    return _pieces({"messages": (_sent(message) for message in messages), **record})


def _sent(message: agent.ChatMessage) -> dict[str, Any]:
    return attachments.with_contents([message])[0].to_openai()


def _openai(
    conversation: Conversation, path: versions.Path | None
) -> tuple[list[agent.ChatMessage], dict[str, Any]]:
    """The messages of an openai record (their files not read yet), and its other fields."""
    rows = active_rows(conversation) if path is None else path.messages
    if not rows:
        raise NothingToExport("no messages")
    archived = path is not None and path.version is not None
    if not archived and getattr(conversation, "has_active_run", False):
        raise ExportRefused("a run is in progress; export it when it has finished")
    try:
        messages = request_messages(conversation, rows)
    except ValidationError as exc:
        raise ExportRefused(f"invalid parameters: {validation_text(exc)}") from None
    violations = history.validate(messages)
    if violations:
        raise ExportRefused(
            f"the history breaks the strict rules ({len(violations)} violation(s), first: "
            f"{violations[0]}); run validate_transcripts --fix"
        )
    record: dict[str, Any] = {}
    tools = tool_definitions(conversation.agent_parameters().enabled_tools)
    if tools:
        record["tools"] = tools
    record["purpose"] = conversation.purpose
    return messages, record


def full_record(conversation: Conversation) -> dict[str, Any]:
    """Every field of the conversation and its rows (fetch them with `for_export(full=True)`).

    Messages come by path: the active one, then each version's in the order of `versions`.
    """
    record = _without_model_calls(conversation)
    record["messages"] = [inline.with_data(message) for message in record["messages"]]
    for run, fields in zip(conversation.runs.all(), record["runs"], strict=True):
        fields["model_calls"] = [_model_call(call) for call in run.model_calls.all()]
    return record


def full_text(conversation: Conversation) -> Iterator[str]:
    """`full_record` as its JSON text (`json.dumps`, `ensure_ascii=False`) in pieces, each
    model call encoded on its own, each message's files read as it is written: a conversation
    of any length is written without its whole record (every request body, every raw stream,
    every file) in memory at once."""
    record = _without_model_calls(conversation)
    record["messages"] = (inline.with_data(message) for message in record["messages"])
    record["runs"] = (
        {**fields, "model_calls": (_model_call(call) for call in run.model_calls.all())}
        for run, fields in zip(conversation.runs.all(), record["runs"], strict=True)
    )
    return _pieces(record)


def _pieces(value: Any) -> Iterator[str]:
    """`json.dumps(value, ensure_ascii=False)` in pieces; a generator in `value` stands for a
    list and is encoded an item at a time."""
    if isinstance(value, dict):
        yield "{"
        for position, (key, item) in enumerate(value.items()):
            yield (", " if position else "") + _encoded(key) + ": "
            yield from _pieces(item)
        yield "}"
    elif isinstance(value, Iterator):
        yield "["
        for position, item in enumerate(value):
            if position:
                yield ", "
            yield from _pieces(item)
        yield "]"
    else:
        yield _encoded(value)


def _encoded(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _model_call(call: ModelCall) -> dict[str, Any]:
    return _record(ModelCallRecord, call).model_dump(mode="json")


def _without_model_calls(conversation: Conversation) -> dict[str, Any]:
    """The full record with every run's `model_calls` left out (the last field of a run)."""
    archived = list(conversation.versions.all())
    version_position = {version.pk: position for position, version in enumerate(archived)}
    messages = sorted(
        conversation.messages.all(),
        key=lambda row: (
            -1 if row.version_id is None else version_position[row.version_id],
            row.index,
        ),
    )
    runs = list(conversation.runs.all())
    started_from = conversation.agent_version
    run_position = {run.pk: position for position, run in enumerate(runs)}
    message_place: dict[int | None, tuple[int | None, int]] = {
        message.pk: (_position(version_position, message.version_id), message.index)
        for message in messages
    }
    record = FullRecord(
        id=conversation.pk,
        owner=conversation.owner.get_username(),
        title=conversation.title,
        purpose=conversation.purpose,
        agent=started_from.agent.name if started_from else None,
        agent_version=started_from.number if started_from else None,
        parameters=conversation.parameters or {},
        created_at=conversation.created_at,
        updated_at=conversation.updated_at,
        usage=Usage(
            prompt_tokens=sum(run.prompt_tokens for run in runs),
            completion_tokens=sum(run.completion_tokens for run in runs),
            total_tokens=sum(run.total_tokens for run in runs),
        ),
        tools=tool_definitions((conversation.parameters or {}).get("enabled_tools") or ()),
        versions=[_version_record(version, version_position) for version in archived],
        messages=[
            _record(
                MessageRecord,
                message,
                run=_position(run_position, message.run_id),
                version=message_place[message.pk][0],
            )
            for message in messages
        ],
        runs=[_run_record(run, message_place) for run in runs],
        history_repairs=[
            _record(HistoryRepairRecord, repair, run=_position(run_position, repair.run_id))
            for repair in conversation.history_repairs.all()
        ],
    )
    unread = {"data", "missing"}  # the caller's, a message at a time (`inline.with_data`)
    return record.model_dump(
        mode="json",
        exclude={
            "runs": {"__all__": {"model_calls"}},
            "messages": {"__all__": {"attachments": {"__all__": unread}}},
        },
    )


def _version_record(version: Version, positions: dict[int, int]) -> VersionRecord:
    return _record(VersionRecord, version, parent=_position(positions, version.parent_id))


def _run_record(run: Run, message_place: dict[int | None, tuple[int | None, int]]) -> RunRecord:
    """The run's record; a tool call's message is named by (version position, index)."""
    tool_calls = []
    for call in run.tool_calls.all():
        version, index = message_place.get(call.message_id, (None, None))
        tool_calls.append(
            _record(
                ToolCallRecord,
                call,
                message=index,
                message_version=version,
                decided_by=call.decider or None,
            )
        )
    return _record(
        RunRecord,
        run,
        created_by=run.created_by.get_username() if run.created_by else None,
        tool_calls=tool_calls,
        model_calls=[],  # the caller's, a call at a time
    )


def _position(positions: dict[int, int], pk: int | None) -> int | None:
    return None if pk is None else positions.get(pk)


def _record[R: BaseModel](kind: type[R], row: Model, **references: Any) -> R:
    """A record of a row: its fields by name, with `references` (positions, usernames) instead
    of database ids."""
    fields = {name: getattr(row, name) for name in kind.model_fields if name not in references}
    return kind.model_validate({**fields, **references})


def records(
    conversations: Iterable[Conversation], *, full: bool, all_versions: bool = False
) -> Iterator[tuple[Conversation, Version | None, dict[str, Any] | Iterator[str] | ExportRefused]]:
    """Each conversation with its record, or why it has none (openai format only). A full
    record comes as its JSON text in pieces (`full_text`).

    With `all_versions` (openai format), a record for every path: the active one (version
    None) first, then each archived version's, as `versions.paths` orders them.
    """
    for conversation in conversations:
        if full:
            yield conversation, None, full_text(conversation)
            continue
        paths = versions.paths(conversation) if all_versions else [None]
        for path in paths:
            try:
                record: Iterator[str] | ExportRefused = openai_text(conversation, path)
            except ExportRefused as exc:
                record = exc
            yield conversation, path.version if path else None, record
