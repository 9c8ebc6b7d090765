"""Tests of chat.runs.recorder and the shutdown wind-up: what a run keeps when it is cut short."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from chat import agent, runs
from chat.agent import events, history
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.models import Message, Run, ToolCall
from chat.runs import liveness
from chat.testing import factories as make

pytestmark = pytest.mark.django_db(transaction=True)
WORDS = " ".join(f"w{number}" for number in range(80))


@pytest.fixture(autouse=True)
def _not_stopping() -> Iterator[None]:
    yield
    liveness.stopping.clear()


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


async def test_a_stopping_process_interrupts_its_runs_and_keeps_what_they_did() -> None:
    release = asyncio.Event()

    async def slow(arguments: dict[str, object]) -> str:
        await release.wait()
        return "never"

    agent.default_registry.register(agent.ToolDefinition(name="sleepy_tool", description="x"), slow)
    try:
        conversation = await make.aconversation(enabled_tools=["sleepy_tool", "get_current_time"])
        client = ScriptedChatClient(
            [
                ScriptedTurn(
                    text="Checking both.",
                    tool_calls=(
                        agent.ToolCall(id="t", name="get_current_time", arguments="{}"),
                        agent.ToolCall(id="s", name="sleepy_tool", arguments="{}"),
                    ),
                )
            ]
        )
        one_done = asyncio.Event()
        finished: list[events.RunEvent] = []

        async def listener(run: Run, event: events.RunEvent) -> None:
            finished.append(event)
            if isinstance(event, events.ToolCallFinished):
                one_done.set()

        handle = await make.start_as_owner(conversation, "go", client, [listener])
        await asyncio.wait_for(one_done.wait(), 5)

        assert await runs.wind_up_all(5) == 1
    finally:
        agent.default_registry.unregister("sleepy_tool")

    assert handle.task.done()
    run = await Run.objects.aget(pk=handle.run.pk)
    assert run.status == "interrupted" and run.error == runs.INTERRUPTED
    stored = await make.ahistory(conversation)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "tool"]
    assert stored[1].content == "Checking both."
    assert json.loads(stored[2].content or "")["timezone"] == "UTC"
    assert "Interrupted" in (stored[3].content or "")
    assert history.validate(stored) == []
    statuses = {t.name: t.status async for t in ToolCall.objects.filter(run=run)}
    assert statuses == {"get_current_time": "completed", "sleepy_tool": "failed"}
    assert isinstance(finished[-1], events.RunFinished) and finished[-1].status == "interrupted"

    # A stopping process takes no new run.
    with pytest.raises(runs.RunRefused, match="restarting"):
        await make.start_as_owner(conversation, "again", ScriptedChatClient(["x"]))
