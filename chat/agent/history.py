"""The strict-history rules of the OpenAI Chat Completions API, as small pure passes.

The API rejects a request whose history breaks the tool-call protocol: every `tool_calls` entry
of an assistant message must be answered by a `tool` message carrying its id, and those replies
must come right after that assistant message, before any other message. A history can break this
when a run is cancelled or the server stops mid tool round, or when stored rows are edited.

`validate()` names each violation; `drop_orphan_tool_messages()`, `answer_dangling_tool_calls()`
and `repair()` fix what can be fixed. Every pass returns a new list holding the *same* objects
(`is`) for the messages it keeps, new objects only for what it adds, and never mutates its input.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .messages import ChatMessage, ToolCall

ReplyFactory = Callable[[ToolCall], str]
"""Builds the content of the tool reply added for an unanswered call."""

UNANSWERED_REASON = "cancelled: the tool call was not answered"


class HistoryRules(NamedTuple):
    """The names of the rules `validate()` checks; iterate `RULES` for all of them."""

    unanswered_tool_call: str = "unanswered_tool_call"
    orphan_tool_message: str = "orphan_tool_message"
    duplicate_tool_reply: str = "duplicate_tool_reply"
    duplicate_tool_call_id: str = "duplicate_tool_call_id"
    empty_tool_call_name: str = "empty_tool_call_name"
    empty_tool_call_id: str = "empty_tool_call_id"


RULES = HistoryRules()

UNANSWERED_TOOL_CALL = RULES.unanswered_tool_call
"""An assistant `tool_calls` entry with no reply before the next non-tool message or the end."""
ORPHAN_TOOL_MESSAGE = RULES.orphan_tool_message
"""A tool message answering no call of the assistant `tool_calls` block right before it."""
DUPLICATE_TOOL_REPLY = RULES.duplicate_tool_reply
"""A second tool message answering the same call of a block."""
DUPLICATE_TOOL_CALL_ID = RULES.duplicate_tool_call_id
"""The same tool call id used twice in the conversation's `tool_calls`."""
EMPTY_TOOL_CALL_NAME = RULES.empty_tool_call_name
"""A tool call with an empty function name."""
EMPTY_TOOL_CALL_ID = RULES.empty_tool_call_id
"""A tool call with an empty id: no tool message can answer it."""

UNFIXABLE_RULES = frozenset({DUPLICATE_TOOL_CALL_ID, EMPTY_TOOL_CALL_NAME, EMPTY_TOOL_CALL_ID})
"""Rules `repair()` cannot fix: they live in the assistant message itself, which it keeps."""


@dataclass(frozen=True, slots=True)
class HistoryViolation:
    """One broken rule: the index of the offending message, the rule name and what is wrong."""

    index: int
    rule: str
    detail: str
    role: str = ""

    def __str__(self) -> str:
        where = f"message {self.index} ({self.role})" if self.role else f"message {self.index}"
        return f"{where}: {self.rule}: {self.detail}"


def error_reply(reason: str) -> ReplyFactory:
    """A reply factory giving `{"error": reason}` as JSON, e.g. for "cancelled by the user"."""

    def reply(call: ToolCall) -> str:
        return json.dumps({"error": reason})

    return reply


_default_reply = error_reply(UNANSWERED_REASON)


@dataclass(slots=True)
class _Block:
    """An assistant message with tool_calls and the run of tool messages right after it."""

    index: int
    message: ChatMessage
    end: int = 0
    answered: set[str] = field(default_factory=set)

    @property
    def ids(self) -> set[str]:
        return {call.id for call in self.message.tool_calls}

    def unanswered(self) -> list[ToolCall]:
        """Calls with a usable id and no reply, in call order, each id once."""
        seen: set[str] = set()
        result: list[ToolCall] = []
        for call in self.message.tool_calls:
            if call.id and call.id not in self.answered and call.id not in seen:
                seen.add(call.id)
                result.append(call)
        return result


@dataclass(slots=True)
class _Scan:
    """What one walk over a history found."""

    blocks: list[_Block] = field(default_factory=list)
    bad_replies: dict[int, HistoryViolation] = field(default_factory=dict)
    call_violations: list[HistoryViolation] = field(default_factory=list)


def _scan(messages: Sequence[ChatMessage]) -> _Scan:
    scan = _Scan()
    block: _Block | None = None
    seen_ids: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "tool":
            call_id = message.tool_call_id or ""
            if block is None or call_id not in block.ids:
                if block is None:
                    why = "no assistant tool_calls block precedes it"
                else:
                    why = f"the block of message {block.index} has no such call"
                scan.bad_replies[index] = HistoryViolation(
                    index,
                    ORPHAN_TOOL_MESSAGE,
                    f"tool_call_id {call_id!r} answers no pending tool call ({why})",
                    message.role,
                )
            elif call_id in block.answered:
                scan.bad_replies[index] = HistoryViolation(
                    index,
                    DUPLICATE_TOOL_REPLY,
                    f"tool_call_id {call_id!r} was already answered",
                    message.role,
                )
            else:
                block.answered.add(call_id)
            if block is not None:
                block.end = index + 1
            continue
        block = None
        if message.role == "assistant" and message.tool_calls:
            block = _Block(index, message, end=index + 1)
            scan.blocks.append(block)
            for call in message.tool_calls:
                scan.call_violations.extend(_call_violations(index, call, seen_ids))
                seen_ids.add(call.id)
    return scan


def _call_violations(index: int, call: ToolCall, seen_ids: set[str]) -> list[HistoryViolation]:
    found: list[HistoryViolation] = []
    if not call.id:
        found.append(
            HistoryViolation(
                index,
                EMPTY_TOOL_CALL_ID,
                f"a call to {call.name!r} has an empty id and cannot be answered",
                "assistant",
            )
        )
    elif call.id in seen_ids:
        found.append(
            HistoryViolation(
                index,
                DUPLICATE_TOOL_CALL_ID,
                f"tool call id {call.id!r} is used more than once",
                "assistant",
            )
        )
    if not call.name:
        found.append(
            HistoryViolation(
                index, EMPTY_TOOL_CALL_NAME, f"tool call {call.id!r} has an empty name", "assistant"
            )
        )
    return found


def validate(
    messages: Sequence[ChatMessage], *, allow_trailing_pending: bool = False
) -> list[HistoryViolation]:
    """Every rule the history breaks, ordered by message index; empty when it is valid.

    With `allow_trailing_pending`, unanswered calls of a final block that no later message
    closes (a history paused mid tool round) are not violations.
    """
    scan = _scan(messages)
    found = [*scan.call_violations, *scan.bad_replies.values()]
    for block in scan.blocks:
        trailing = block.end == len(messages)
        if trailing and allow_trailing_pending:
            continue
        after = "the end of the history" if trailing else f"message {block.end}"
        found.extend(
            HistoryViolation(
                block.index,
                UNANSWERED_TOOL_CALL,
                f"tool call {call.id!r} ({call.name}) has no reply before {after}",
                "assistant",
            )
            for call in block.unanswered()
        )
    return sorted(found, key=lambda violation: violation.index)


def pending_tool_calls(messages: Sequence[ChatMessage]) -> list[ToolCall]:
    """The unanswered calls of a final assistant tool_calls block, in call order; else empty."""
    scan = _scan(messages)
    if not scan.blocks or scan.blocks[-1].end != len(messages):
        return []
    return scan.blocks[-1].unanswered()


def drop_orphan_tool_messages(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Removes tool messages that answer no pending call and repeated replies (keeps the first)."""
    bad = _scan(messages).bad_replies
    return [message for index, message in enumerate(messages) if index not in bad]


def answer_dangling_tool_calls(
    messages: Sequence[ChatMessage], *, reply: ReplyFactory | None = None
) -> list[ChatMessage]:
    """Adds, after each block's existing replies, a tool reply for every unanswered call.

    A reply's content is `reply(call)`, by default `{"error": "cancelled: the tool call was not
    answered"}`; pass e.g. `error_reply("cancelled by the user")`. Calls with an empty id get no
    reply: a tool message needs an id.
    """
    make = reply or _default_reply
    insertions: dict[int, list[ChatMessage]] = {}
    for block in _scan(messages).blocks:
        added = [
            ChatMessage(role="tool", content=make(call), tool_call_id=call.id)
            for call in block.unanswered()
        ]
        if added:
            insertions[block.end] = added
    if not insertions:
        return list(messages)
    result: list[ChatMessage] = []
    for index, message in enumerate(messages):
        result.extend(insertions.get(index, ()))
        result.append(message)
    result.extend(insertions.get(len(messages), ()))
    return result


def repair(
    messages: Sequence[ChatMessage], *, reply: ReplyFactory | None = None
) -> list[ChatMessage]:
    """Drops orphan and repeated tool replies, then answers every dangling call.

    Afterwards `validate()` reports only `UNFIXABLE_RULES` (duplicate call ids, empty names,
    empty ids), which live in assistant messages this pass keeps as they are.
    """
    return answer_dangling_tool_calls(drop_orphan_tool_messages(messages), reply=reply)
