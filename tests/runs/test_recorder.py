"""Tests of chat.runs.recorder: a streaming reply is checkpointed, so a killed process loses at
most one window of it (tests/test_shutdown.py kills real processes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from chat.agent import events, history
from chat.agent.scripted import ScriptedChatClient
from chat.models import Message, Run
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
