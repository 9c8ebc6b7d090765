"""Stored conversations for tests and the benchmark, built row by row."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from chat import agent, transcripts
from chat.agent import events
from chat.agent.clients import ChatClient
from chat.models import Conversation, HistoryRepair, Message, ModelCall, Run, ToolCall
from chat.runs import RunHandle, default_parameters, start_run

T0 = datetime(2025, 3, 1, 9, 30, 0, 123456, tzinfo=UTC)


def user(name: str = "ada", **fields: Any) -> User:
    found, _ = get_user_model().objects.get_or_create(username=name, defaults=fields)
    return found


def logged_in(user: Any, *, csrf: bool = False) -> Client:
    """A test client signed in as `user` (checking CSRF tokens as a browser's would, if asked)."""
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def conversation(owner: User, title: str = "", **parameters: Any) -> Conversation:
    """A conversation with these agent parameters (the defaults of AgentParameters otherwise)."""
    return _saved(owner, title, agent.AgentParameters.model_validate(parameters))


def new_conversation(owner: User, title: str = "", **overrides: Any) -> Conversation:
    """A conversation as the app starts one (every tool enabled), with these parameters
    changed."""
    return _saved(owner, title, default_parameters().model_copy(update=overrides))


def _saved(owner: User, title: str, parameters: agent.AgentParameters) -> Conversation:
    made = Conversation(owner=owner, title=title)
    made.set_agent_parameters(parameters)
    made.save()
    return made


@database_sync_to_async
def aconversation(**parameters: Any) -> Conversation:
    """`conversation(user(), **parameters)`, from async tests."""
    return conversation(user(), **parameters)


@database_sync_to_async
def ahistory(made: Conversation) -> list[agent.ChatMessage]:
    """The stored history of a conversation, from async tests."""
    return transcripts.load_history(made)


async def start_as_owner(
    made: Conversation,
    content: str | None,
    client: ChatClient | None = None,
    listeners: Sequence[Callable[[Run, events.RunEvent], Awaitable[None]]] = (),
    version_from: int | None = None,
) -> RunHandle:
    """`runs.start_run` by the conversation's owner, from async tests."""
    owner = await database_sync_to_async(lambda: made.owner)()
    return await start_run(
        conversation=made,
        user=owner,
        content=content,
        client=client,
        listeners=listeners,
        version_from=version_from,
    )


def run_turn(
    made: Conversation,
    content: str | None,
    client: ChatClient | None = None,
    *,
    version_from: int | None = None,
) -> Run:
    """Start a run as the owner (the configured client unless given) and wait for its end."""

    async def go() -> Run:
        handle = await start_run(
            conversation=made,
            user=made.owner,
            content=content,
            client=client,
            version_from=version_from,
        )
        return await handle.task

    return asyncio.run(go())


def settings_form(**overrides: Any) -> dict[str, Any]:
    """A valid POST of the conversation settings panel (a system prompt, a pre-message)."""
    return {
        "agent-model": "",
        "agent-temperature": "0.5",
        "agent-top_p": "",
        "agent-max_tokens": "",
        "agent-max_event_loops": "4",
        "agent-enabled_tools": ["handoff_note"],
        "system-TOTAL_FORMS": "1",
        "system-INITIAL_FORMS": "0",
        "system-0-content": "Be brief.",
        "pre-TOTAL_FORMS": "1",
        "pre-INITIAL_FORMS": "0",
        "pre-0-role": "assistant",
        "pre-0-content": "How can I help?",
        **overrides,
    }


def profile_form(**overrides: Any) -> dict[str, Any]:
    """A valid POST of the provider profile form (the admin's, and check_provider's)."""
    return {
        "name": "mistral",
        "base_url": "https://api.mistral.ai/v1",
        "api_key_env": "MISTRAL_API_KEY",
        "model": "mistral-small-latest",
        "tool_call_content": "empty",
        "tool_call_ids": "alnum9",
        "reasoning_field": "",
        "notes": "",
        **overrides,
    }


def call(id: str, name: str, arguments: str = "{}") -> agent.ToolCall:
    return agent.ToolCall(id=id, name=name, arguments=arguments)


def tool_log(
    run: Run, message: Message | None, asked: agent.ToolCall, result: str, **fields: Any
) -> ToolCall:
    """The (unsaved) execution log of a call: failed when `fields` carry an error."""
    return ToolCall(
        run=run,
        message=message,
        call_id=asked.id,
        name=asked.name,
        arguments=asked.arguments,
        status="failed" if fields.get("error") else "completed",
        result=result,
        **fields,
    )


def crashed_run(made: Conversation, worker: str, *, age: float = 0) -> Run:
    """A run left in progress mid tool round by `worker`, last seen `age` seconds ago."""
    run = Run.objects.create(
        conversation=made, worker=worker, heartbeat_at=timezone.now() - timedelta(seconds=age)
    )
    asking = call("c1", "get_current_time")
    transcripts.append_messages(
        made,
        [
            agent.ChatMessage(role="user", content="q"),
            agent.ChatMessage(role="assistant", tool_calls=(asking,)),
        ],
        run=run,
    )
    ToolCall.objects.create(run=run, call_id=asking.id, name=asking.name)
    return run


def rich_conversation(owner: User, title: str = "Time and notes") -> Conversation:
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
    time_call = call("call_a", "get_current_time", '{"timezone":"Europe/Paris"}')
    note_call = call("call_b", "handoff_note", '{"note": ""}')
    user_row, asking, *replies, answer = transcripts.append_messages(
        made,
        [
            agent.ChatMessage(role="user", content="What time is it? Leave a note <b>too</b>."),
            agent.ChatMessage(
                role="assistant",
                reasoning="The user wants two tools.",
                tool_calls=(time_call, note_call),
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
    when: dict[str, Any] = {"step": 1, "started_at": T0, "finished_at": T0 + timedelta(seconds=1)}
    outcomes = [(time_call, 0.01, ""), (note_call, 0.02, "note is too short")]
    results = [reply.content or "" for reply in replies]
    ToolCall.objects.bulk_create(
        tool_log(first, asking, asked, result, position=n, duration=took, error=error, **when)
        for n, ((asked, took, error), result) in enumerate(zip(outcomes, results, strict=True))
    )
    ModelCall.objects.bulk_create(
        [
            model_call(
                {"model": "m-1", "messages": [{"role": "user", "content": "…"}]},
                run=first,
                step=1,
                model="m-1",
                http_status=200,
                finish_reason="tool_calls",
                prompt_tokens=10,
                completion_tokens=8,
                total_tokens=18,
                time_to_first_token=0.25,
                duration=0.7,
            ),
            model_call(
                {"model": "m-1", "messages": []},
                run=first,
                step=2,
                model="m-1",
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


def model_call(request: dict[str, Any], **fields: Any) -> ModelCall:
    """An unsaved model call that sent `request` (stored whole)."""
    call = ModelCall(**fields)
    call.request = request
    return call


def big_conversation(
    owner: User, *, messages: int, tool_calls: int, runs: int, title: str = "big"
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
        model_call({"model": "m-big"}, run=run, step=step, model="m-big")
        for run in run_rows
        for step in (1, 2)
    )
    askers = messages // 2
    per_message = max(1, tool_calls // askers)
    rows: list[Message] = []
    logs: list[ToolCall] = []
    for number in range(askers):
        run = run_rows[number * runs // askers]
        ids = [f"call_{number}_{n}" for n in range(per_message)]
        asking = agent.ChatMessage(
            role="assistant",
            content=f"step {number}",
            tool_calls=tuple(call(id, "get_current_time", '{"timezone": "UTC"}') for id in ids),
        )
        reply = agent.ChatMessage(role="tool", tool_call_id=ids[0], content='{"iso": "now"}')
        asking_row, reply_row = (
            Message(conversation=made, run=run, index=2 * number + offset, **fields)
            for offset, fields in enumerate(map(transcripts.message_fields, (asking, reply)))
        )
        rows += [asking_row, reply_row]
        logs += [
            tool_log(run, asking_row, asked, '{"iso": "now"}', position=n, error=_every_7th(n))
            for n, asked in enumerate(asking.tool_calls)
        ]
    Message.objects.bulk_create(rows)
    ToolCall.objects.bulk_create(logs)
    return made


def _every_7th(position: int) -> str:
    """The error of one call in seven, so that the logs mix completed and failed calls."""
    return "boom" if position % 7 == 3 else ""
