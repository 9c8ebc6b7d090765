"""Message rows <-> ChatMessage values. The strict-history invariant is kept here."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence

from django.db import transaction
from django.db.models import Model

from chat import agent
from chat.agent import history
from chat.models import Conversation, HistoryRepair, Message, Run, Version

from . import versions


def to_chat_message(row: Message) -> agent.ChatMessage:
    return agent.ChatMessage(
        role=row.role,
        content=row.content,
        tool_calls=tuple(agent.ToolCall.from_openai(call) for call in row.tool_calls or ()),
        tool_call_id=row.tool_call_id or None,
        reasoning=row.reasoning or None,
        attachments=tuple(agent.Attachment.model_validate(a) for a in row.attachments or ()),
    )


def message_fields(message: agent.ChatMessage) -> dict[str, object]:
    """The Message row fields for a value (conversation, run and index are the caller's)."""
    return {
        "role": message.role,
        "content": message.content,
        "reasoning": message.reasoning or "",
        "tool_calls": [call.to_openai() for call in message.tool_calls],
        "tool_call_id": message.tool_call_id or "",
        "attachments": [a.stored().model_dump(mode="json") for a in message.attachments],
    }


def to_chat_messages(rows: Iterable[Message]) -> list[agent.ChatMessage]:
    return [to_chat_message(row) for row in rows]


def load_history(conversation: Conversation) -> list[agent.ChatMessage]:
    return to_chat_messages(conversation.messages.active())


def next_index(conversation: Conversation) -> int:
    last = conversation.messages.active().order_by("-index").values_list("index", flat=True).first()
    return 0 if last is None else last + 1


def append_messages(
    conversation: Conversation,
    messages: Sequence[agent.ChatMessage],
    *,
    start: int | None = None,
    **fields: object,
) -> list[Message]:
    """Append values at the end of the stored transcript (call inside a transaction).

    `start` is the next free index when the caller already knows it (it saves a query).
    """
    if start is None:
        start = next_index(conversation)
    return Message.objects.bulk_create(
        Message(conversation=conversation, index=start + offset, **message_fields(m), **fields)
        for offset, m in enumerate(messages)
    )


def create_as_recorded[M: Model](model: type[M], rows: list[M], stamp: str) -> list[M]:
    """Bulk-create copied or imported rows, then put back the `stamp` timestamps (creation
    times) that auto_now_add replaced with the time of the copy."""
    stamps = [getattr(row, stamp) for row in rows]
    created = model._default_manager.bulk_create(rows)
    for row, value in zip(created, stamps, strict=True):
        setattr(row, stamp, value)
    if created:
        model._default_manager.bulk_update(created, [stamp], batch_size=500)
    return created


def validate_conversation(conversation: Conversation) -> list[history.HistoryViolation]:
    return history.validate(load_history(conversation))


def tool_reply(reason: str) -> Callable[[agent.ToolCall], str]:
    """A reply for calls that never got an answer, e.g. "cancelled by the user"."""
    return lambda call: json.dumps({"error": f"{reason}: {call.name} was not run to the end"})


@transaction.atomic
def repair_conversation(
    conversation: Conversation,
    *,
    reason: str,
    run: Run | None = None,
    version: Version | None = None,
) -> tuple[int, int]:
    """Make the stored transcript strict-valid with the history passes.

    Answers dangling tool calls with a reply naming `reason` and drops orphan tool messages;
    a HistoryRepair row records what changed. Returns (messages added, messages removed).

    The active path, or with `version` that archived version's path: the passes see all of it,
    but only the version's own rows change, as the messages before it belong to other paths
    too (a change the passes would make there is left to the path that owns them).
    """
    Conversation.objects.select_for_update().filter(pk=conversation.pk).exists()
    before, rows, start = _path_rows(conversation, version)
    values = to_chat_messages(rows)
    context = to_chat_messages(before)
    repaired = _own_part(history.repair([*context, *values], reply=tool_reply(reason)), context)
    kept = {id(value) for value in repaired}
    removed = [row.pk for row, value in zip(rows, values, strict=True) if id(value) not in kept]
    row_for = {id(value): row for row, value in zip(rows, values, strict=True)}
    added = [value for value in repaired if id(value) not in row_for]
    if not removed and not added:
        return 0, 0
    context_rows = {id(value): row for row, value in zip(before, context, strict=True)}
    Message.objects.filter(pk__in=removed).delete()
    # Renumber above the current range first so the path's unique index holds throughout.
    offset = (rows[-1].index + 1) if rows else 0
    survivors = [row_for[id(value)] for value in repaired if id(value) in row_for]
    for row in survivors:
        row.index += offset + len(repaired)
    Message.objects.bulk_update(survivors, ["index"])
    new_rows: list[Message] = []
    for position, value in enumerate(repaired):
        kept_row = row_for.get(id(value))
        if kept_row is None:
            run_id = _run_of_preceding(
                [*context, *repaired], len(context) + position, {**row_for, **context_rows}
            )
            new_rows.append(
                Message(
                    conversation=conversation,
                    index=start + position,
                    run_id=run_id,
                    version=version,
                    **message_fields(value),
                )
            )
        else:
            kept_row.index = start + position
    Message.objects.bulk_update(survivors, ["index"])
    Message.objects.bulk_create(new_rows)
    HistoryRepair.objects.create(
        conversation=conversation,
        run=run,
        reason=reason if version is None else f"{reason} ({version})",
        added=[
            {"index": start + position, **value.to_openai()}
            for position, value in enumerate(repaired)
            if id(value) not in row_for
        ],
        removed=[
            {"index": row.index, **value.to_openai()}
            for row, value in zip(rows, values, strict=True)
            if id(value) not in kept
        ],
    )
    return len(added), len(removed)


def _run_of_preceding(
    values: Sequence[agent.ChatMessage], position: int, row_for: dict[int, Message]
) -> int | None:
    for value in reversed(values[:position]):
        row = row_for.get(id(value))
        if row is not None:
            return row.run_id
    return None


def _path_rows(
    conversation: Conversation, version: Version | None
) -> tuple[list[Message], list[Message], int]:
    """The rows of a path before its own ones, its own rows, and the index its own rows start at
    (the conversation is locked, so no other process changes them)."""
    if version is None:
        return [], list(conversation.messages.select_for_update().active()), 0
    path = next((p for p in versions.paths(conversation) if p.version == version), None)
    if path is None:
        raise ValueError(f"{version} is not a version of conversation {conversation.pk}")
    own = [row for row in path.messages if row.version_id == version.pk]
    return path.messages[: len(path.messages) - len(own)], own, version.index


def _own_part(
    repaired: list[agent.ChatMessage], context: Sequence[agent.ChatMessage]
) -> list[agent.ChatMessage]:
    """What follows the last kept message of `context` in a repaired path: the path's own part,
    with a reply to a call that ends `context` (the first message the path may add)."""
    if not context:
        return repaired
    ids = {id(value) for value in context}
    last = max((p for p, value in enumerate(repaired) if id(value) in ids), default=-1)
    return repaired[last + 1 :]
