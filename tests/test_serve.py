"""The server as production runs it (`python -m chat.serve`, daphne) and a real WebSocket client:
a frame over daphne's 1 MiB default reaches the consumer; one over the limit is refused aloud."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import websockets
from django.conf import settings

from chat.testing.processes import ROOT, DaphneServer
from chat.testing.site import Site, sqlite_site
from chat.testing.sockets import DONE

pytestmark = pytest.mark.slow

LIMIT = settings.AGENTLAB_WS_MAX_FRAME_BYTES


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with sqlite_site({"AGENTLAB_SCRIPTED_DELAY": "0"}) as site:
        yield site


def socket(server: DaphneServer, session: str, conversation: int) -> websockets.connect:
    return websockets.connect(
        server.websocket_url(conversation),
        origin=server.url,
        additional_headers={"Cookie": f"sessionid={session}"},
        max_size=None,
    )


async def frames_until(ws: websockets.ClientConnection, marker: str) -> list[str]:
    frames: list[str] = []
    async with asyncio.timeout(15):
        while not frames or marker not in frames[-1]:
            frames.append(str(await ws.recv()))
    return frames


def frame(message: str) -> str:
    return json.dumps({"action": "send", "message": message})


def test_the_default_limit_is_4_mib_far_above_the_longest_message() -> None:
    assert LIMIT == 4 * 1024 * 1024
    assert LIMIT >= 16 * settings.AGENTLAB_MAX_MESSAGE_CHARS


def test_a_limit_below_the_longest_message_stops_the_start() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import agentlab_site.settings"],
        cwd=ROOT,
        env={**os.environ, "AGENTLAB_WS_MAX_FRAME_BYTES": "100000"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert "AGENTLAB_WS_MAX_FRAME_BYTES must be at least 16 bytes a character" in result.stderr


def test_a_frame_of_1_5_mib_gets_the_too_long_notice_and_the_socket_goes_on(site: Site) -> None:
    session, (conversation,) = site.make_conversations(1, "ada")
    message = "x" * (1536 * 1024)

    async def scenario(server: DaphneServer) -> None:
        async with socket(server, session, conversation) as ws:
            await ws.send(frame(message))
            (notice,) = await frames_until(ws, 'id="notice"')
            assert "The message is too long: 1,572,864 characters (the limit is 32,000)." in notice
            await ws.send(frame("hello"))
            frames = await frames_until(ws, DONE)
            assert "hello" in "".join(frames)

    with site.daphne() as server:
        asyncio.run(scenario(server))
        assert server.errors() == []


def test_a_frame_over_the_limit_is_refused_with_1009_and_the_reason(site: Site) -> None:
    session, (conversation,) = site.make_conversations(1, "bob")

    async def scenario(server: DaphneServer) -> None:
        async with socket(server, session, conversation) as ws:
            await ws.send(frame("x" * LIMIT))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 15)
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 1009
        assert f"exceeds payload limit of {LIMIT} octets" in closed.value.rcvd.reason

    with site.daphne() as server:
        asyncio.run(scenario(server))
