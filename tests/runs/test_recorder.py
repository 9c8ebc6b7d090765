"""Tests of chat.runs.recorder: a streaming reply is checkpointed, so a killed process loses at
most one window of it (tests/test_shutdown.py kills real processes)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db import connection

from chat import agent
from chat.agent import events, history
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.fragments import RunPublisher, render
from chat.models import Message, Run
from chat.runs import tasks
from chat.testing import factories as make
from chat.turns import turn_for_run

pytestmark = pytest.mark.django_db(transaction=True)
WORDS = " ".join(f"w{number}" for number in range(80))


@pytest.fixture(autouse=True)
def _not_stopping() -> Iterator[None]:
    yield
    tasks.stopping.clear()


async def assistant_rows(run: Run) -> list[Message]:
    return [m async for m in Message.objects.filter(run=run, role="assistant").order_by("index")]


async def test_a_long_reply_is_checkpointed_while_it_streams(settings: Any) -> None:
    settings.AGENTLAB_CHECKPOINT_SECONDS = 0.05
    conversation = await make.aconversation()
    seen: list[str] = []

    async def listener(run: Run, event: events.RunEvent) -> None:
        if isinstance(event, events.TextDelta) and event.text.strip() == "w60":
            seen.extend([(m.content or "") for m in await assistant_rows(run)])

    handle = await make.start_as_owner(
        conversation, "hi", ScriptedChatClient([WORDS], delay=0.005), [listener]
    )
    run = await handle.task

    # Mid-stream, a draft row held a good part of the reply, but not all of it.
    (draft,) = seen
    assert WORDS.startswith(draft) and "w40" in draft and not draft.endswith("w79")
    # At the end the same row holds the whole reply: completed, not duplicated.
    (final,) = await assistant_rows(run)
    assert final.content == WORDS
    assert history.validate(await make.ahistory(conversation)) == []


async def test_a_short_reply_writes_no_checkpoint(settings: Any) -> None:
    settings.AGENTLAB_CHECKPOINT_SECONDS = 60
    conversation = await make.aconversation()
    updates: list[str] = []

    async def listener(run: Run, event: events.RunEvent) -> None:
        if (
            isinstance(event, events.TextDelta)
            and await Message.objects.filter(run=run, role="assistant").aexists()
        ):
            updates.append(event.text)

    handle = await make.start_as_owner(
        conversation, "hi", ScriptedChatClient([WORDS], delay=0.001), [listener]
    )
    await handle.task
    assert updates == []


async def test_the_finished_frame_shows_what_a_reload_shows() -> None:
    """The finished reply is rendered from the rows the run wrote, not read back: it must be
    the page's own rendering of the turn, tool pills included."""
    conversation = await make.aconversation(enabled_tools=["get_current_time"])
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(conversation.group_name, channel)
    client = ScriptedChatClient(
        [
            ScriptedTurn(
                tool_calls=(
                    agent.ToolCall(
                        id="call_1", name="get_current_time", arguments='{"timezone": "UTC"}'
                    ),
                )
            ),
            "It is **noon** in Paris.",
        ]
    )
    handle = await make.start_as_owner(conversation, "What time is it in Paris?", client)
    run = await handle.task
    frames = []
    with contextlib.suppress(TimeoutError):
        while True:
            frames.append((await asyncio.wait_for(layer.receive(channel), 0.5))["html"])
    finished = frames[-1]
    assert 'data-running="false"' in finished

    def reloaded() -> str:
        return render("reply", {"turn": turn_for_run(run), "oob": True})

    page = await database_sync_to_async(reloaded)()
    assert "Get current time" in page and "<strong>noon</strong>" in page
    assert finished.startswith(page)
    assert RunPublisher.streaming == 0  # the run no longer makes other runs' frames longer


async def test_a_run_ends_with_its_last_turn_in_one_write_of_its_row() -> None:
    """A reply without tool calls and the run's end are saved together: one UPDATE of the run."""
    conversation = await make.aconversation()
    statements: list[str] = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(sql)
        return execute(sql, params, many, context)

    def install() -> None:
        connection.execute_wrappers.append(count)

    def uninstall() -> None:
        connection.execute_wrappers.remove(count)

    await database_sync_to_async(install)()
    try:
        handle = await make.start_as_owner(conversation, "hi", ScriptedChatClient(["hello"]))
        run = await handle.task
    finally:
        await database_sync_to_async(uninstall)()
    assert run.status == "completed"
    updates = [sql for sql in statements if sql.startswith('UPDATE "chat_run"')]
    assert len(updates) == 1
    (reply,) = await assistant_rows(run)
    assert reply.content == "hello"
