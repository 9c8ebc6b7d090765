"""A tool call's progress on the page: the indicator reads "Looking up: Research · 40% · 3 s",
at most a few frames a second per call, the last report always shown, and its seconds cost no
frame (the page counts them). End to end through the test MCP server's `research` tool (real
progress notifications over streamable HTTP) and a real conversation socket."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from chat.agent.events import ToolCallProgress
from chat.agent.messages import ToolCall
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.fragments import LiveState, render
from chat.models import Conversation, McpServer, Run
from chat.models import ToolCall as ToolCallRow
from chat.runs import lifecycle
from chat.runs import mcp as hub_module
from chat.testing import factories as make
from chat.testing.mcp_server import McpHttpServer
from chat.testing.sockets import DONE, connect, frames_until, send
from chat.tool_progress import Pacer, elapsed_text, indicator_label, progress_text
from tests.browser import tools as slow_tools

PERCENT = re.compile(r"Looking up: Research · (\d+)%")


def heard(progress: float, total: float | None = None, message: str | None = None) -> str:
    return progress_text(ToolCallProgress("c1", progress, total, message))


def test_a_percentage_when_the_total_is_known_else_the_message_else_the_count() -> None:
    assert heard(2, 5, "reading source 3 of 5") == "40%"
    assert heard(0.999, 1) == "99%"
    assert heard(7, 5) == "100%"
    assert heard(3, None, "  reading   the index  ") == "reading the index"
    assert heard(3, 0, "x" * 200) == "x" * 79 + "…"
    assert heard(1536) == "1536"
    assert heard(0.5, float("nan")) == "0.5"
    assert indicator_label("docs__research", ToolCallProgress("c1", 2, 5)) == "Research · 40%"
    assert indicator_label("docs__research", None) == "Research"


async def test_the_pacer_sends_at_most_one_frame_per_interval_and_always_the_last() -> None:
    pacer = Pacer(interval=0.2)
    sent: list[int] = []

    def sender(value: int) -> Any:
        async def send() -> None:
            sent.append(value)

        return send

    for value in range(10):
        await pacer.offer("c1", sender(value))
        await pacer.offer("c2", sender(100 + value))
    assert sent == [0, 100]  # the first of each call at once
    await asyncio.sleep(0.3)
    # Then the last one of each, once (the two calls' timers keep no order between them).
    assert sent[:2] == [0, 100] and sorted(sent[2:]) == [9, 109]

    await pacer.offer("c1", sender(10))
    pacer.forget("c2")
    await pacer.offer("c2", sender(110))
    await pacer.offer("c2", sender(111))
    pacer.close()
    await asyncio.sleep(0.3)
    assert sent[4:] == [110]  # c1's offer came too soon; c2 began anew


@pytest.fixture(scope="module")
def research_http() -> Any:
    with McpHttpServer("docs") as server:
        yield server


@database_sync_to_async
def researching_conversation(url: str) -> tuple[Any, Conversation]:
    McpServer.objects.create(name="docs", transport="http", url=url)
    owner = get_user_model().objects.create_user("ada", password="pw-123456789")
    made = make.conversation(owner, "research")
    made.parameters = {  # as the settings store a choice
        "enabled_tools": ["docs__research"],
        "tool_policies": {"docs__research": "run"},
    }
    made.save()
    return owner, made


@pytest.mark.django_db(transaction=True)
async def test_mcp_progress_reaches_the_page_live(
    research_http: McpHttpServer, hub: hub_module.Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, made = await researching_conversation(research_http.url)
    await hub.refresh(await McpServer.objects.aget(name="docs"))
    arguments = '{"topic": "deploys", "steps": 10, "pause": 0.1}'
    research = ToolCall(id="c1", name="docs__research", arguments=arguments)
    client = ScriptedChatClient([ScriptedTurn(tool_calls=(research,)), "Ten sources read."])
    monkeypatch.setattr(lifecycle, "build_client", lambda *_, **__: client)
    ws = await connect(owner, made)

    await send(ws, "Research deploys")
    frames = await frames_until(ws, DONE, wait=10)

    shown = [int(found) for frame in frames for found in PERCENT.findall(frame)]
    assert shown, "no indicator with a percentage"
    assert shown == sorted(shown) and shown[-1] >= 50
    # About a second of reports (ten): about four frames a second, not one per report.
    assert len(shown) <= 6
    indicators = [frame for frame in frames if 'id="indicator-' in frame]
    assert "Looking up" not in indicators[-1]
    assert "Ten sources read." in frames[-1]
    await ws.disconnect()


def test_elapsed_time_is_said_in_whole_seconds_then_minutes() -> None:
    said = [elapsed_text(s) for s in (-1, 0, 0.99, 3.9, 59.99, 60, 125, 3600)]
    assert said == ["0 s", "0 s", "0 s", "3 s", "59 s", "1 min 0 s", "2 min 5 s", "60 min 0 s"]


def test_the_indicator_says_how_long_each_call_has_run() -> None:
    now = timezone.now()
    state = LiveState(
        running={"c1": "search_docs", "c2": "docs__research"},
        started={"c1": now - timedelta(seconds=3.2), "c2": now - timedelta(seconds=65)},
        progress={"c2": ToolCallProgress("c2", 2, 5)},
    )
    html = render("indicator", {"key": 7, "calls": state.indicator()})
    text = re.sub(r"<[^>]+>", "", html).strip()
    assert text == "Looking up: Search docs · 3 s, Research · 40% · 1 min 5 s"
    assert "step" not in html
    first, second = (int(ms) for ms in re.findall(r'data-elapsed-ms="(\d+)"', html))
    assert 3200 <= first < 3700 and 65_000 <= second < 65_500
    started = re.findall(r'<time class="elapsed" datetime="([^"]+)"', html)
    assert started == [state.started["c1"].isoformat(), state.started["c2"].isoformat()]
    assert "aria-live" not in html  # the status region says "Looking up" once; no second ticks
    empty = render("indicator", {"key": 7, "calls": LiveState().indicator()})
    assert empty.strip() == '<div class="indicator" id="indicator-7"></div>'


@pytest.mark.django_db
def test_the_page_drawn_during_a_call_says_how_long_it_has_run(client_in: Any, user: Any) -> None:
    made = make.new_conversation(user, "slow")
    run = Run.objects.create(conversation=made, status="in_progress", model="scripted")
    started = timezone.now() - timedelta(seconds=5)
    ToolCallRow.objects.create(
        run=run, step=1, call_id="c1", name="slow_lookup", started_at=started
    )
    waiting = {"approval": "waiting", "position": 1}  # asked, not started
    ToolCallRow.objects.create(run=run, step=1, call_id="c2", name="search_cards", **waiting)
    page = client_in.get(reverse("chat:conversation_detail", args=[made.pk])).content.decode()
    (line,) = re.findall(r'<div class="indicator" id="indicator-\d+">(.*?)</div>', page)
    assert re.sub(r"<[^>]+>", "", line) in {f"Looking up: Slow lookup · {s} s" for s in (5, 6)}
    assert "elapsed.js" in page


@pytest.mark.django_db(transaction=True)
async def test_a_slow_call_costs_no_frame_while_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    owner = await database_sync_to_async(make.user)()
    made = await database_sync_to_async(make.new_conversation)(
        owner, tool_policies={"slow_lookup": "run"}
    )
    lookup = ToolCall(id="c1", name="slow_lookup", arguments="{}")
    client = ScriptedChatClient([ScriptedTurn(tool_calls=(lookup,)), "Found it."])
    monkeypatch.setattr(lifecycle, "build_client", lambda *_, **__: client)
    ws = await connect(owner, made)

    await send(ws, "Look it up, slowly")
    arrivals: list[tuple[float, str]] = []
    while not arrivals or DONE not in arrivals[-1][1]:
        frame = await ws.receive_from(timeout=5)
        arrivals.append((time.monotonic(), frame))

    started = next(i for i, (_, f) in enumerate(arrivals) if "Looking up: Slow lookup · " in f)
    ended = next(i for i, (_, f) in enumerate(arrivals) if i > started and "pill-completed" in f)
    assert ">0 s</time>" in arrivals[started][1]
    assert arrivals[ended][0] - arrivals[started][0] > slow_tools.SLOW_SECONDS - 0.3
    assert ended == started + 1  # the page counts the seconds: none of them is a frame
    await ws.disconnect()
