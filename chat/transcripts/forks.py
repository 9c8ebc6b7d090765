"""Forks: a new conversation holding a copy of another's history up to a message.

A fork copies the messages, the runs they belong to and those runs' tool and model call logs,
so its pills and inspector read like the parent's, and the settings with the agent version the
parent started from (its header says "Support v3", or "changed from Support v3", as the
parent's does). A tool fork replaces one tool reply with a result the user wrote (or marks it
failed) and ends right after that tool round, so a run can continue the loop from there. The
parent is never changed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Sum

from chat.models import Conversation, Message, ModelCall, Run, ToolCall, ToolCallStatus
from chat.models.request_store import attach

from .model_calls import create_chained
from .rows import create_as_recorded, validate_conversation

MAX_TOOL_RESULT_CHARS = 100_000
FAILED_BY_USER = "marked failed by the user"
EDITED_MARK = "Result edited by the user in this fork."
FAILED_MARK = "(marked failed by the user in this fork)"
COPIED_FIELDS = (
    "index",
    "role",
    "content",
    "reasoning",
    "tool_calls",
    "tool_call_id",
    "attachments",
)
FORK_MARK = " (fork)"


class RunInProgress(ValueError):
    """The parent has a run in progress: its history is still moving."""


@dataclass(frozen=True)
class Round:
    """An assistant message with tool_calls (at `start`) and its tool replies, through `end`."""

    start: int
    end: int
    call_ids: tuple[str, ...]


def message_at(rows: Sequence[Message], index: int) -> Message:
    """The message with this index, or ValueError saying which indexes there are."""
    for row in rows:
        if row.index == index:
            return row
    if not rows:
        raise ValueError("This conversation has no messages to fork.")
    raise ValueError(
        f"Message {index} is out of range: this conversation has messages "
        f"{rows[0].index} to {rows[-1].index}."
    )


def tool_rounds(rows: Sequence[Message]) -> list[Round]:
    """The tool rounds of a transcript, by message index, in order."""
    rounds: list[Round] = []
    for position, row in enumerate(rows):
        if row.role != Message.Role.ASSISTANT or not row.tool_calls:
            continue
        end = row.index
        for later in rows[position + 1 :]:
            if later.role != Message.Role.TOOL:
                break
            end = later.index
        ids = tuple(str(call.get("id") or "") for call in row.tool_calls)
        rounds.append(Round(row.index, end, ids))
    return rounds


def fork_end(rows: Sequence[Message], at_message: int) -> int:
    """The last index a fork after `at_message` copies: a tool round is never cut in half."""
    for found in tool_rounds(rows):
        if found.start <= at_message <= found.end:
            return found.end
    return at_message


def tool_fork_round(rows: Sequence[Message], at_message: int, tool_call_id: str) -> Round:
    """The round of `tool_call_id` at or just before `at_message` (ValueError if there is none)."""
    rounds = [found for found in tool_rounds(rows) if tool_call_id in found.call_ids]
    if not rounds:
        raise ValueError(f"There is no tool call {tool_call_id!r} in this conversation.")
    before = [found for found in rounds if found.start <= at_message]
    if not before:
        raise ValueError(
            f"Tool call {tool_call_id!r} comes after message {at_message} "
            f"(it is asked for in message {rounds[0].start})."
        )
    return before[-1]


def fork_title(parent: Conversation) -> str:
    """The parent's title marked as a fork: "Trip planning (fork)". The mark goes last so that
    the sidebar, which cuts long titles, still shows the title first; a fork of a fork is
    marked once."""
    title = str(parent)
    if title.endswith(FORK_MARK):
        return title
    limit = Conversation._meta.get_field("title").max_length or 200
    return title[: limit - len(FORK_MARK)] + FORK_MARK


def edited_reply(tool_result: str | None, tool_failed: bool) -> str:
    """The tool reply content the model sees in the fork."""
    if tool_failed:
        return json.dumps({"error": (tool_result or "").strip() or FAILED_BY_USER})
    return tool_result or ""


@transaction.atomic
def fork_conversation(
    conversation: Conversation,
    *,
    owner: Any,
    at_message: int,
    tool_result: str | None = None,
    tool_failed: bool = False,
    tool_call_id: str | None = None,
) -> Conversation:
    """Copy `conversation` through message `at_message` (extended to the end of a tool round).

    With `tool_call_id` and an edit (`tool_result` and/or `tool_failed`), that call's reply is
    replaced and the fork ends after its round, ready for a run without a new message. Raises
    ValueError, writing nothing, when a run is in progress, the index or the call is unknown,
    or the copy would not be strict-valid.
    """
    parent = Conversation.objects.select_for_update().get(pk=conversation.pk)
    if parent.has_unfinished_run():
        raise RunInProgress(
            "A run is in progress in this conversation: fork it once it has finished."
        )
    if tool_result is not None and len(tool_result) > MAX_TOOL_RESULT_CHARS:
        raise ValueError(
            f"The edited result is too long: {len(tool_result):,} characters "
            f"(the limit is {MAX_TOOL_RESULT_CHARS:,})."
        )
    editing = tool_result is not None or tool_failed
    if editing and not tool_call_id:
        raise ValueError("Name the tool call whose result is edited.")
    rows = list(parent.messages.active())
    message_at(rows, at_message)
    edited_round = tool_fork_round(rows, at_message, tool_call_id) if tool_call_id else None
    end = edited_round.end if edited_round else fork_end(rows, at_message)
    copied = [row for row in rows if row.index <= end]
    reply = None
    if edited_round is not None:
        reply = next(
            (
                row
                for row in copied
                if row.index > edited_round.start and row.tool_call_id == tool_call_id
            ),
            None,
        )
    if editing and reply is None:
        raise ValueError(f"Tool call {tool_call_id!r} has no reply to edit.")

    fork = Conversation.objects.create(
        owner=owner,
        title=fork_title(parent),
        profile_id=parent.profile_id,
        parent=parent,
        forked_at=end,
        parameters=parent.parameters,
        # The same settings, so the same agent version to have started from (or changed from).
        agent_version_id=parent.agent_version_id,
    )
    run_map = _copy_runs(fork, rows, copied)
    message_map = _copy_messages(fork, copied, run_map)
    _copy_tool_calls(rows, copied, run_map, message_map)
    if editing and edited_round is not None and reply is not None:
        new_reply = message_map[reply.pk]
        new_reply.content = edited_reply(tool_result, tool_failed)
        new_reply.save(update_fields=["content"])
        _mark_edited(fork, edited_round, reply.tool_call_id, tool_result, tool_failed)
    violations = validate_conversation(fork)
    if violations:
        raise ValueError(
            "The copied history would not be valid: " + "; ".join(str(v) for v in violations)
        )
    return fork


def _run_ids(rows: Sequence[Message]) -> set[int]:
    return {row.run_id for row in rows if row.run_id is not None}


def _copied_steps(run_id: int, copied: Sequence[Message]) -> int:
    """How many model turns of a run the copy holds: its assistant messages, in order."""
    return sum(1 for row in copied if row.run_id == run_id and row.role == "assistant")


def _copy_runs(
    fork: Conversation, rows: Sequence[Message], copied: Sequence[Message]
) -> dict[int, Run]:
    """Copy the runs that answered in the copied messages; a run cut short keeps its copied steps.

    A run of which only the user message is copied is left out: nothing it did is in the fork.
    """
    answering = _run_ids([row for row in copied if row.role != "user"])
    whole = {run_id for run_id in answering if run_id not in _run_ids(rows[len(copied) :])}
    run_map: dict[int, Run] = {}
    cut: dict[int, int] = {}
    """Runs cut short, by original key: the steps their copies keep."""
    calls = list(
        ModelCall.objects.filter(run_id__in=answering).order_by(
            "run__started_at", "run_id", "step", "pk"
        )
    )
    attach(calls)  # every request rebuilt in one pass, before the copies get new keys
    for run in Run.objects.filter(pk__in=answering).order_by("started_at", "pk"):
        original = run.pk
        started_at = run.started_at
        steps = run.steps if original in whole else _copied_steps(original, copied)
        run.pk = None
        run.conversation = fork
        run._state.adding = True
        run.save(force_insert=True)
        Run.objects.filter(pk=run.pk).update(started_at=started_at)
        run_map[original] = run
        if original not in whole:
            cut[original] = steps
    kept = [call for call in calls if call.step <= cut.get(call.run_id, call.step)]
    for call in kept:
        call.pk = None
        call.run = run_map[call.run_id]
        call._state.adding = True
    create_chained(kept)
    for original, steps in cut.items():
        _recount(run_map[original], steps)
    return run_map


def _recount(run: Run, steps: int) -> None:
    """Usage of a run cut short: what its copied model calls used; its duration is unknown."""
    totals = run.model_calls.aggregate(
        prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"), total=Sum("total_tokens")
    )
    run.steps = steps
    run.prompt_tokens = totals["prompt"] or 0
    run.completion_tokens = totals["completion"] or 0
    run.total_tokens = totals["total"] or 0
    run.duration = None
    if not steps:
        run.time_to_first_token = None
    run.save(
        update_fields=[
            "steps",
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "duration",
            "time_to_first_token",
        ]
    )


def _copy_messages(
    fork: Conversation, copied: Sequence[Message], run_map: dict[int, Run]
) -> dict[int, Message]:
    new_rows = [
        Message(
            conversation=fork,
            run=run_map.get(row.run_id) if row.run_id is not None else None,
            created_at=row.created_at,
            **{name: getattr(row, name) for name in COPIED_FIELDS},
        )
        for row in copied
    ]
    created = create_as_recorded(Message, new_rows, "created_at")
    return {original.pk: row for original, row in zip(copied, created, strict=True)}


def _copy_tool_calls(
    rows: Sequence[Message],
    copied: Sequence[Message],
    run_map: dict[int, Run],
    message_map: dict[int, Message],
) -> None:
    """The execution logs of the copied assistant messages (all of a run copied whole)."""
    whole = {run_id for run_id in run_map if run_id not in _run_ids(rows[len(copied) :])}
    logs = []
    for log in ToolCall.objects.filter(run_id__in=run_map).order_by(
        "run", "step", "position", "pk"
    ):
        if log.message_id in message_map:
            log.message = message_map[log.message_id]
        elif log.message_id is None and log.run_id in whole:
            log.message = None
        else:
            continue
        log.pk = None
        log.run = run_map[log.run_id]
        log._state.adding = True
        logs.append(log)
    ToolCall.objects.bulk_create(logs)


def _mark_edited(
    fork: Conversation,
    edited_round: Round,
    call_id: str,
    tool_result: str | None,
    tool_failed: bool,
) -> None:
    """The copied log of the edited call says what the model saw, and that the user wrote it."""
    content = edited_reply(tool_result, tool_failed)
    if tool_failed:
        reason = (tool_result or "").strip() or FAILED_BY_USER
        status, error = ToolCallStatus.FAILED, f"{reason} {FAILED_MARK}"
    else:
        status, error = ToolCallStatus.COMPLETED, EDITED_MARK
    ToolCall.objects.filter(
        message__conversation=fork, message__index=edited_round.start, call_id=call_id
    ).update(status=status, result=content, error=error)
