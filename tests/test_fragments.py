"""RunPublisher's coalescing: the first token at once, then at most one frame per interval."""

from __future__ import annotations

import asyncio
import re

import pytest
from channels.layers import get_channel_layer

from chat import agent, fragments
from chat.agent import events
from chat.fragments import RunPublisher
from chat.frame_rate import BUSY_FLUSH_INTERVAL, BUSY_STREAMS, QUIET_STREAMS, frame_interval
from chat.models import Conversation, Message, Run
from chat.turns import Turn

INTERVAL = 0.05


async def listen(run: Run) -> tuple[object, str]:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(f"conversation.{run.conversation_id}", channel)
    return layer, channel


async def drain(layer: object, channel: str) -> list[str]:
    frames = []
    while True:
        try:
            async with asyncio.timeout(0.005):
                frames.append((await layer.receive(channel))["html"])  # type: ignore[attr-defined]
        except TimeoutError:
            return frames


def text_of(frame: str) -> str:
    return "".join(re.findall(r'-text" hx-swap-oob="beforeend">(.*?)</span>', frame, re.S))


@pytest.fixture
def run() -> Run:
    return Run(pk=9001, conversation_id=9001)


async def test_the_first_token_is_published_before_the_next_one_is_taken(run: Run) -> None:
    layer, channel = await listen(run)
    publisher = RunPublisher(run, interval=INTERVAL)

    await publisher(run, events.TextDelta("t0 "))

    frames = await drain(layer, channel)
    assert len(frames) == 1 and "t0 " in frames[0]


async def test_a_burst_makes_one_frame_and_one_pending_flush(run: Run) -> None:
    layer, channel = await listen(run)
    publisher = RunPublisher(run, interval=INTERVAL)
    await publisher(run, events.TextDelta("t0 "))
    await asyncio.sleep(INTERVAL * 1.5)  # the next delta is due at once
    await drain(layer, channel)
    before = len(asyncio.all_tasks())

    for number in range(1, 500):
        await publisher(run, events.TextDelta(f"t{number} "))
        assert len(asyncio.all_tasks()) <= before + 1

    frames = await drain(layer, channel)
    assert len(frames) == 1
    assert text_of(frames[0]) == "".join(f"t{number} " for number in range(1, 500))


async def test_late_deltas_still_go_out_after_a_quiet_spell(run: Run) -> None:
    layer, channel = await listen(run)
    publisher = RunPublisher(run, interval=INTERVAL)
    await publisher(run, events.TextDelta("a"))
    await asyncio.sleep(INTERVAL * 1.5)
    await publisher(run, events.TextDelta("b"))
    await publisher(run, events.TextDelta("c"))
    await asyncio.sleep(INTERVAL * 0.5)

    frames = await drain(layer, channel)
    assert [text_of(frame) for frame in frames] == ["a", "bc"]
    assert publisher.state.text == ["a", "bc"]


def test_the_run_started_frame_needs_no_query() -> None:
    """No django_db mark here: any query would raise."""
    conversation = Conversation(pk=9001, title="Cards & pills")
    run = Run(pk=9001, conversation=conversation, status="in_progress")
    user = Message(pk=9001, conversation=conversation, index=0, role="user", content="<hi>")
    publisher = RunPublisher(run, user_message=user)

    html = asyncio.run(publisher._render(events.RunStarted()))

    assert 'id="turn-9001"' in html and "&lt;hi&gt;" in html
    assert "Cards &amp; pills" in html and 'id="reply-9001-text"' in html


async def test_the_first_frame_is_rendered_aside_and_carries_the_first_words() -> None:
    conversation = Conversation(pk=9002, title="Order")
    run = Run(pk=9002, conversation=conversation, status="in_progress")
    user = Message(pk=9002, conversation=conversation, index=0, role="user", content="hi")
    layer, channel = await listen(run)
    publisher = RunPublisher(run, user_message=user, sender=channel, interval=INTERVAL)

    await publisher(run, events.RunStarted())
    await publisher(run, events.StepStarted(1, 8))  # returns at once: the request goes out
    sent = events.ModelRequestSent(body={}, url="scripted:")
    await publisher(run, sent)  # returns at once: the response is read
    assert not publisher._opening.done()  # type: ignore[union-attr]
    await publisher(run, events.TextDelta("t0 "))
    await publisher(run, events.TextDelta("t1 "))

    frames = await drain(layer, channel)
    assert len(frames) == 1  # one render in the browser for the question and the first words
    assert frames[0].index('id="turn-9002"') < frames[0].index('-text" hx-swap-oob="beforeend"')
    assert text_of(frames[0]) == "t0 "
    await asyncio.sleep(INTERVAL * 1.5)
    assert [text_of(frame) for frame in await drain(layer, channel)] == ["t1 "]


async def test_the_first_frame_does_not_wait_long_for_a_slow_model() -> None:
    conversation = Conversation(pk=9003, title="Slow")
    run = Run(pk=9003, conversation=conversation, status="in_progress")
    layer, channel = await listen(run)
    publisher = RunPublisher(run, interval=INTERVAL)

    await publisher(run, events.RunStarted())
    await asyncio.sleep(fragments.OPENING_WAIT + 0.02)

    frames = await drain(layer, channel)
    assert len(frames) == 1 and 'id="turn-9003"' in frames[0]


def test_a_failed_calls_live_pill_says_why_and_so_does_the_catch_up_snapshot() -> None:
    """No django_db mark here: the live pills come from the events, not from rows."""
    conversation = Conversation(pk=9004, title="Rockets")
    run = Run(pk=9004, conversation=conversation, status="in_progress")
    publisher = RunPublisher(run)
    asked = agent.ToolCall(id="c1", name="launch_rockets", arguments="{}")
    result = events.ToolResult(
        tool_call=asked,
        content="{}",
        status="failed",
        error="tool 'launch_rockets' is not available (offered: none)",
        failure="unknown_tool",
    )
    pill = (
        '<span class="pill pill-failed pill-unknown_tool" title="tool &#x27;launch_rockets&#x27; '
        'is not available (offered: none)"><span class="pill-name">Launch rockets</span> '
        '<span class="pill-kind">· unknown tool</span></span>'
    )

    html = asyncio.run(publisher._render(events.ToolCallFinished(result)))
    assert pill in html

    snapshot = fragments.render(
        "live-reply", {"turn": Turn(user=None, run=run), "live": publisher.state}
    )
    assert pill in snapshot


def test_frames_grow_longer_while_many_runs_stream() -> None:
    assert frame_interval(0.04, 1) == frame_interval(0.04, QUIET_STREAMS) == 0.04
    assert 0.04 < frame_interval(0.04, (QUIET_STREAMS + BUSY_STREAMS) // 2) < BUSY_FLUSH_INTERVAL
    assert frame_interval(0.04, BUSY_STREAMS) == frame_interval(0.04, 1_000) == BUSY_FLUSH_INTERVAL
    assert frame_interval(0.2, 1_000) == 0.2  # a longer interval of the caller's is kept


async def test_every_id_a_live_frame_targets_is_an_element_of_the_page() -> None:
    """Text, reasoning and pills are appended by id: the ids the publisher writes and the ids
    the page renders come from one helper (fragment_id), so they cannot drift apart."""
    conversation = Conversation(pk=9005, title="Ids")
    run = Run(pk=9005, conversation=conversation, status="in_progress")
    publisher = RunPublisher(run)
    publisher._buffer(events.TextDelta("words"))
    publisher._buffer(events.ReasoningDelta("thinking"))
    asked = agent.ToolCall(id="c1", name="search_cards", arguments="{}")
    done = events.ToolResult(tool_call=asked, content="{}", status="completed")
    frames = publisher._drain() + await publisher._render(events.ToolCallFinished(done))
    targets = set(re.findall(r'id="([^"]+)" hx-swap-oob="beforeend"', frames))
    assert targets == {"reply-9005-text", "reply-9005-reasoning", "pills-9005"}

    page = fragments.render("live-reply", {"turn": Turn(user=None, run=run), "live": None})
    assert targets <= set(re.findall(r'id="([^"]+)"', page))


async def test_finished_blocks_arrive_rendered_while_the_one_being_written_stays_raw() -> None:
    conversation = Conversation(pk=9006, title="Blocks")
    run = Run(pk=9006, conversation=conversation, status="in_progress")
    publisher = RunPublisher(run)

    publisher._buffer(events.TextDelta("Run this:\n\n```python\nprint(1)\n"))
    first = publisher._drain()
    publisher._buffer(events.TextDelta("```\n\n| a | b |\n"))
    second = publisher._drain()

    # The paragraph is finished once the fence began; the fence once the table's line is whole.
    assert '<div id="reply-9006-done" hx-swap-oob="beforeend"><p>Run this:</p>' in first
    assert (
        '<span id="reply-9006-text" hx-swap-oob="innerHTML">```python\nprint(1)\n</span>' in first
    )
    assert '<div class="code-block">' in second and "```" not in second.split("innerHTML")[1]
    assert second.endswith('<span id="reply-9006-text" hx-swap-oob="innerHTML">| a | b |\n</span>')
    snapshot = fragments.render(
        "live-reply", {"turn": Turn(user=None, run=run), "live": publisher.state}
    )
    assert "<p>Run this:</p>" in snapshot and '<div class="code-block">' in snapshot
    assert '-text">| a | b |\n' in snapshot  # a page opened now shows the same
    page = fragments.render("live-reply", {"turn": Turn(user=None, run=run), "live": None})
    assert 'id="reply-9006-done"' in page
