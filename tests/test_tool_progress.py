"""A tool call's progress on the page: the indicator reads "Looking up: Research · 40%", at
most a few frames a second per call, the last report always shown. End to end through the test
MCP server's `research` tool (real progress notifications over streamable HTTP) and a real
conversation socket."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model

from chat.agent.events import ToolCallProgress
from chat.agent.messages import ToolCall
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.models import Conversation, McpServer
from chat.runs import lifecycle
from chat.runs import mcp as hub_module
from chat.testing import factories as make
from chat.testing.mcp_server import McpHttpServer
from chat.testing.sockets import DONE, connect, frames_until, send
from chat.tool_progress import Pacer, indicator_label, progress_text

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
