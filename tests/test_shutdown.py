"""A server that stops keeps what its users watched stream: SIGTERM winds its runs up, SIGKILL
loses at most one checkpoint window. Real daphne processes, real signals, real WebSockets."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import time
from collections.abc import Iterator

import httpx
import pytest
import websockets

from chat.testing.processes import DaphneServer
from chat.testing.site import Site, sqlite_site
from chat.testing.sockets import streamed_text

pytestmark = pytest.mark.slow
# About 75 words at 0.06 s each: the reply streams for some 4.5 s.
ENV = {"AGENTLAB_SCRIPTED_DELAY": "0.06", "AGENTLAB_CHECKPOINT_SECONDS": "0.5"}
PROMPT = "Tell me a long story about " + " ".join(f"topic{n}" for n in range(25))


@pytest.fixture
def site() -> Iterator[Site]:
    with sqlite_site(env=ENV) as made:
        yield made


def rows(site: Site, query: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(site.database_url.removeprefix("sqlite:///")) as connection:
        return connection.execute(query).fetchall()


async def watch_then_signal(server: DaphneServer, session: str, conversation: int, sig: int) -> str:
    """Send the prompt, read the stream for 2 s, signal the server; the text seen on screen."""
    frames: list[str] = []
    async with websockets.connect(
        server.websocket_url(conversation),
        origin=server.url,
        additional_headers={"Cookie": f"sessionid={session}"},
    ) as ws:
        await ws.send(json.dumps({"action": "send", "message": PROMPT}))
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                frames.append(str(await asyncio.wait_for(ws.recv(), 0.2)))
            except TimeoutError:
                continue
        await asyncio.to_thread(server.stop, sig)
    return streamed_text(frames)


def test_sigterm_winds_up_the_run_and_keeps_everything_that_streamed(site: Site) -> None:
    session, (conversation,) = site.make_conversations(1, "ada")
    server = site.daphne().start()
    started = time.monotonic()
    seen = asyncio.run(watch_then_signal(server, session, conversation, signal.SIGTERM))
    stopped_in = time.monotonic() - started - 2.0

    assert len(seen) > 100, seen
    assert stopped_in < 8, f"SIGTERM took {stopped_in:.1f} s"
    # Without a restart: the stopping process itself marked the run and saved the text.
    ((status, error),) = rows(site, "select status, error from chat_run")
    assert status == "interrupted" and "server process stopped" in error
    saved = rows(site, "select role, content from chat_message order by `index`")
    assert [role for role, _ in saved] == ["user", "assistant"]
    assert str(saved[1][1]).startswith(seen.strip()[:100])
    assert len(str(saved[1][1])) >= len(seen.strip())
    assert server.errors() == []


def test_sigkill_loses_at_most_one_checkpoint_and_the_page_shows_what_was_kept(
    site: Site,
) -> None:
    session, (conversation,) = site.make_conversations(1, "ada")
    server = site.daphne().start()
    seen = asyncio.run(watch_then_signal(server, session, conversation, signal.SIGKILL))
    assert rows(site, "select status from chat_run") == [("in_progress",)]

    with site.daphne() as restarted:  # recovery runs as a process starts
        ((status,),) = rows(site, "select status from chat_run")
        assert status == "interrupted"
        (kept,) = rows(site, "select content from chat_message where role = 'assistant'")
        kept_text = str(kept[0])
        # Saved every 0.5 s: at most that window (about 9 words at 0.06 s) is lost.
        assert seen.strip().startswith(kept_text.strip()[:50])
        assert len(kept_text) >= len(seen.strip()) - 9 * 12, (len(kept_text), len(seen))
        page = httpx.get(f"{restarted.url}/c/{conversation}/", cookies={"sessionid": session}).text
        assert kept_text.split()[5] in page
        assert "Interrupted" in page

        # The next message works, on a history a strict provider accepts.
        async def next_message() -> None:
            async with websockets.connect(
                restarted.websocket_url(conversation),
                origin=restarted.url,
                additional_headers={"Cookie": f"sessionid={session}"},
            ) as ws:
                await ws.send(json.dumps({"action": "send", "message": "and then?"}))
                async with asyncio.timeout(20):
                    while 'data-running="false"' not in str(await ws.recv()):
                        pass

        asyncio.run(next_message())
        statuses = [s for (s,) in rows(site, "select status from chat_run order by id")]
        assert statuses == ["interrupted", "completed"]
        restarted.stop()
    roles = [r for (r,) in rows(site, "select role from chat_message order by `index`")]
    assert roles == ["user", "assistant", "user", "assistant"]
