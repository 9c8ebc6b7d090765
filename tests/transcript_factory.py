"""Stored conversations for tests of the admin and the transcript commands, built row by row."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser

from chat import agent, transcripts
from chat.models import Conversation, HistoryRepair, Message, ModelCall, Run, ToolCall

T0 = datetime(2025, 3, 1, 9, 30, 0, 123456, tzinfo=UTC)


def user(name: str = "ada", **fields: Any) -> AbstractBaseUser:
    User = get_user_model()
    found, _ = User.objects.get_or_create(username=name, defaults=fields)
    return found


def conversation(owner: AbstractBaseUser, title: str = "", **parameters: Any) -> Conversation:
    made = Conversation(owner=owner, title=title)
    made.set_agent_parameters(agent.AgentParameters.model_validate(parameters))
    made.save()
    return made


def call(id: str, name: str, arguments: str = "{}") -> agent.ToolCall:
    return agent.ToolCall(id=id, name=name, arguments=arguments)


def rich_conversation(owner: AbstractBaseUser, title: str = "Time and notes") -> Conversation:
    """Two runs using every field: reasoning, a failed call, null and empty content, a repair."""
    made = conversation(
        owner,
        title,
        model="m-1",
        system_prompts=["Be brief."],
        temperature=0.2,
        enabled_tools=["get_current_time", "handoff_note"],
    )
    first = Run.objects.create(
        conversation=made,
        created_by=owner,
        status="completed",
        model="m-1",
        parameters=made.parameters,
        steps=2,
        prompt_tokens=30,
        completion_tokens=12,
        total_tokens=42,
        time_to_first_token=0.25,
        duration=1.5,
        worker="host:1:abc",
        heartbeat_at=T0,
        finished_at=T0 + timedelta(seconds=2),
    )
    user_row, asking, *replies, answer = transcripts.append_messages(
        made,
        [
            agent.ChatMessage(role="user", content="What time is it? Leave a note <b>too</b>."),
            agent.ChatMessage(
                role="assistant",
                reasoning="The user wants two tools.",
                tool_calls=(
                    call("call_a", "get_current_time", '{"timezone":"Europe/Paris"}'),
                    call("call_b", "handoff_note", '{"note": ""}'),
                ),
            ),
            agent.ChatMessage(
                role="tool",
                tool_call_id="call_a",
                content=json.dumps({"timezone": "Europe/Paris", "iso": "2025-03-01T10:30:00"}),
            ),
            agent.ChatMessage(
                role="tool", tool_call_id="call_b", content='{"error": "note is too short"}'
            ),
            agent.ChatMessage(role="assistant", content="It is 10:30 in Paris.", reasoning="ok"),
        ],
        run=first,
    )
    ToolCall.objects.bulk_create(
        [
            ToolCall(
                run=first,
                message=asking,
                step=1,
                position=0,
                call_id="call_a",
                name="get_current_time",
                arguments='{"timezone":"Europe/Paris"}',
                status="completed",
                result=replies[0].content,
                started_at=T0,
                finished_at=T0 + timedelta(seconds=1),
                duration=0.01,
            ),
            ToolCall(
                run=first,
                message=asking,
                step=1,
                position=1,
                call_id="call_b",
                name="handoff_note",
                arguments='{"note": ""}',
                status="failed",
                result=replies[1].content,
                error="note is too short",
                started_at=T0,
                finished_at=T0 + timedelta(seconds=1),
                duration=0.02,
            ),
        ]
    )
    ModelCall.objects.bulk_create(
        [
            ModelCall(
                run=first,
                step=1,
                model="m-1",
                request={"model": "m-1", "messages": [{"role": "user", "content": "…"}]},
                http_status=200,
                finish_reason="tool_calls",
                prompt_tokens=10,
                completion_tokens=8,
                total_tokens=18,
                time_to_first_token=0.25,
                duration=0.7,
            ),
            ModelCall(
                run=first,
                step=2,
                model="m-1",
                request={"model": "m-1", "messages": []},
                http_status=200,
                attempts=2,
                finish_reason="stop",
                prompt_tokens=20,
                completion_tokens=4,
                total_tokens=24,
                time_to_first_token=0.3,
                duration=0.5,
            ),
        ]
    )
    second = Run.objects.create(
        conversation=made,
        created_by=owner,
        status="failed",
        model="m-1",
        steps=1,
        error="HTTP 500: upstream exploded",
        finished_at=T0 + timedelta(minutes=5),
    )
    transcripts.append_messages(
        made,
        [
            agent.ChatMessage(role="user", content="And now?"),
            agent.ChatMessage(role="assistant", content="", reasoning="cut short"),
        ],
        run=second,
    )
    ModelCall.objects.create(
        run=second, step=1, model="m-1", http_status=500, error="upstream exploded"
    )
    HistoryRepair.objects.create(
        conversation=made,
        run=second,
        reason="cancelled",
        added=[{"index": 7, "role": "tool", "tool_call_id": "x", "content": "{}"}],
    )
    assert user_row.role == "user" and answer.role == "assistant"
    return made


def big_conversation(
    owner: AbstractBaseUser, *, messages: int, tool_calls: int, runs: int, title: str = "big"
) -> Conversation:
    """`messages` rows alternating assistant (with tool calls) and tool, logs for every call.

    Only the first call of each assistant message gets a tool reply: the admin shows any
    history, valid or not, and the point here is size.
    """
    made = conversation(owner, title, enabled_tools=["get_current_time"])
    run_rows = Run.objects.bulk_create(
        Run(conversation=made, status="completed", model="m-big", total_tokens=10)
        for _ in range(runs)
    )
    ModelCall.objects.bulk_create(
        ModelCall(run=run, step=step, model="m-big", request={"model": "m-big"})
        for run in run_rows
        for step in (1, 2)
    )
    askers = messages // 2
    per_message = max(1, tool_calls // askers)
    rows = []
    for number in range(askers):
        run = run_rows[number * runs // askers]
        ids = [f"call_{number}_{n}" for n in range(per_message)]
        asking = agent.ChatMessage(
            role="assistant",
            content=f"step {number}",
            tool_calls=tuple(call(id, "get_current_time", '{"timezone": "UTC"}') for id in ids),
        )
        reply = agent.ChatMessage(role="tool", tool_call_id=ids[0], content='{"iso": "now"}')
        for offset, value in enumerate((asking, reply)):
            rows.append(
                Message(
                    conversation=made,
                    run=run,
                    index=2 * number + offset,
                    **transcripts.message_fields(value),
                )
            )
    stored = Message.objects.bulk_create(rows)
    ToolCall.objects.bulk_create(
        ToolCall(
            run_id=message.run_id,
            message=message,
            position=position,
            call_id=value["id"],
            name="get_current_time",
            arguments='{"timezone": "UTC"}',
            status="failed" if position % 7 == 3 else "completed",
            result='{"iso": "now"}',
            error="boom" if position % 7 == 3 else "",
        )
        for message in stored
        for position, value in enumerate(message.tool_calls)
    )
    return made
