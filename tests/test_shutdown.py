"""A server that stops interrupts nothing: SIGTERM lets a run finish its turn or let it go for
the next process, SIGKILL leaves it to the next process; the restarted process resumes it.
Real daphne processes, real signals, real WebSockets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

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


def socket_of(server: DaphneServer, session: str, conversation: int) -> Any:
    """A WebSocket to a conversation's page on `server`, logged in with `session`."""
    return websockets.connect(
        server.websocket_url(conversation),
        origin=server.url,
        additional_headers={"Cookie": f"sessionid={session}"},
    )


async def watch_then_signal(server: DaphneServer, session: str, conversation: int, sig: int) -> str:
    """Send the prompt, read the stream for 2 s, signal the server; the text seen on screen."""
    frames: list[str] = []
    async with socket_of(server, session, conversation) as ws:
        await ws.send(json.dumps({"action": "send", "message": PROMPT}))
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                frames.append(str(await asyncio.wait_for(ws.recv(), 0.2)))
            except TimeoutError:
                continue
        await asyncio.to_thread(server.stop, sig)
    return streamed_text(frames)


def statuses(site: Site) -> list[tuple[object, ...]]:
    return rows(site, "select status, resumes, worker from chat_run order by id")


def replies(site: Site) -> list[str]:
    return [
        str(c) for (c,) in rows(site, "select content from chat_message where role = 'assistant'")
    ]


async def wait_for_end(server: DaphneServer, session: str, conversation: int) -> str:
    """Reconnect to the conversation and read until its run ends; the text streamed."""
    frames: list[str] = []
    async with socket_of(server, session, conversation) as ws:
        async with asyncio.timeout(30):
            while 'data-running="false"' not in (frame := str(await ws.recv())):
                frames.append(frame)
    return streamed_text(frames)


def test_sigterm_lets_a_run_finish_its_turn_within_the_grace(site: Site) -> None:
    """A deploy stops the process: the reply streaming (4.5 s in all, signalled at 2 s) ends
    its turn within AGENTLAB_SHUTDOWN_SECONDS, the run completes, and then the process exits."""
    session, (conversation,) = site.make_conversations(1, "ada")
    server = site.daphne().start()
    started = time.monotonic()
    seen = asyncio.run(watch_then_signal(server, session, conversation, signal.SIGTERM))
    stopped_in = time.monotonic() - started - 2.0

    assert len(seen) > 100, seen
    assert stopped_in < 8, f"SIGTERM took {stopped_in:.1f} s"
    assert [run[:2] for run in statuses(site)] == [("completed", 0)]
    (reply,) = replies(site)
    assert reply.startswith(seen.strip()[:100]) and len(reply) > len(seen.strip())
    assert server.errors() == []


def test_sigterm_with_a_short_grace_lets_the_run_go_and_the_restart_resumes_it() -> None:
    with sqlite_site(env={**ENV, "AGENTLAB_SHUTDOWN_SECONDS": "1"}) as site:
        session, (conversation,) = site.make_conversations(1, "ada")
        server = site.daphne().start()
        seen = asyncio.run(watch_then_signal(server, session, conversation, signal.SIGTERM))
        (run,) = statuses(site)
        assert run == ("in_progress", 0, "")  # let go, for the next process
        (draft,) = replies(site)
        assert draft.strip() and seen.strip().startswith(draft.strip()[:50])

        with site.daphne() as restarted:  # it resumes the run as it starts
            asyncio.run(wait_for_end(restarted, session, conversation))
            ((status, resumes, _),) = statuses(site)
            assert (status, resumes) == ("completed", 1)
            (reply,) = replies(site)
            assert reply.startswith(seen.strip()[:100])  # the scripted model tells it again
            page = httpx.get(
                f"{restarted.url}/c/{conversation}/", cookies={"sessionid": session}
            ).text
            assert "resumed" in page and reply.split()[-1] in page
            assert restarted.errors() == []
        leases = rows(site, "select outcome from chat_runlease order by id")
        assert leases == [("released",), ("finished",)]


def test_sigkill_mid_reply_the_restarted_process_resumes_and_completes_it(site: Site) -> None:
    session, (conversation,) = site.make_conversations(1, "ada")
    server = site.daphne().start()
    seen = asyncio.run(watch_then_signal(server, session, conversation, signal.SIGKILL))
    (run,) = statuses(site)
    assert run[0] == "in_progress" and run[2]  # still held by the dead process

    with site.daphne() as restarted:  # its pid is gone: the run is claimed at once
        asyncio.run(wait_for_end(restarted, session, conversation))
        ((status, resumes, _),) = statuses(site)
        assert (status, resumes) == ("completed", 1)
        (reply,) = replies(site)
        assert reply.startswith(seen.strip()[:100])

        # The next message works, on a history a strict provider accepts.
        async def next_message() -> None:
            async with socket_of(restarted, session, conversation) as ws:
                await ws.send(json.dumps({"action": "send", "message": "and then?"}))
                async with asyncio.timeout(20):
                    while 'data-running="false"' not in str(await ws.recv()):
                        pass

        asyncio.run(next_message())
        assert [s for s, _, _ in statuses(site)] == ["completed", "completed"]
        restarted.stop()
    roles = [r for (r,) in rows(site, "select role from chat_message order by `index`")]
    assert roles == ["user", "assistant", "user", "assistant"]


RUN_CRASH_PROCESS = """
from chat.models import Conversation
conversation = Conversation.objects.get(pk={conversation})
parameters = conversation.agent_parameters()
policies = {{**parameters.tool_policies, "crash_process": "run"}}
conversation.set_agent_parameters(parameters.model_copy(update={{"tool_policies": policies}}))
conversation.save(update_fields=["parameters"])
"""


def test_a_run_that_kills_its_process_every_time_fails_after_max_resumes() -> None:
    env = {**ENV, "AGENTLAB_TOOL_MODULES": "tests.crash_tools", "AGENTLAB_MAX_RESUMES": "1"}
    with sqlite_site(env=env) as site:
        session, (conversation,) = site.make_conversations(1, "ada")
        # Killing its process is not read-only, so by default the call would ask a person and
        # the run would wait, holding no process; this conversation lets it run without asking.
        site.manage("shell", stdin=RUN_CRASH_PROCESS.format(conversation=conversation))
        server = site.daphne().start()

        async def ask() -> None:
            async with socket_of(server, session, conversation) as ws:
                await ws.send(json.dumps({"action": "send", "message": "crash process, please"}))
                with contextlib.suppress(websockets.ConnectionClosed):
                    async with asyncio.timeout(20):
                        while True:
                            await ws.recv()

        asyncio.run(ask())
        assert server.process is not None and server.process.wait(timeout=20) == -signal.SIGKILL
        # Restarted, it resumes the run at once and dies again (maybe before it is ready).
        again = site.daphne()
        with contextlib.suppress(RuntimeError):
            again.start()
        assert again.process is not None and again.process.wait(timeout=20) == -signal.SIGKILL
        assert statuses(site)[0][:2] == ("in_progress", 1)
        with site.daphne():  # resumed once already: past AGENTLAB_MAX_RESUMES, it fails
            deadline = time.monotonic() + 20
            while statuses(site)[0][0] == "in_progress" and time.monotonic() < deadline:
                time.sleep(0.1)
        ((status, resumes, _),) = statuses(site)
        (error,) = rows(site, "select error from chat_run")
        assert (status, resumes) == ("failed", 2)
        assert error == (
            "Stopped: the run was resumed 1 times and its process stopped each time "
            "(AGENTLAB_MAX_RESUMES is 1).",
        )


def test_a_run_waiting_for_approval_survives_a_restart_and_resumes_on_the_next_process(
    site: Site,
) -> None:
    """A run that waits holds no process: the server stops (SIGTERM, no grace needed), another
    starts, and the owner's decision over the new server's socket resumes and completes it."""
    session, (conversation,) = site.make_conversations(1, "ada")
    server = site.daphne().start()

    async def ask() -> None:
        async with socket_of(server, session, conversation) as ws:
            await ws.send(json.dumps({"action": "send", "message": "Leave a handoff note: noon"}))
            async with asyncio.timeout(20):
                while 'data-waiting="Handoff note"' not in str(await ws.recv()):
                    pass

    asyncio.run(ask())
    stopped = time.monotonic()
    server.stop(signal.SIGTERM)
    assert time.monotonic() - stopped < 5  # nothing to finish: the run holds no task
    ((run, status, worker),) = rows(site, "select id, status, worker from chat_run")
    assert (status, worker) == ("requires_action", "")
    ((call, approval),) = rows(site, "select id, approval from chat_toolcall")
    assert approval == "waiting"

    with site.daphne() as restarted:
        assert [s for s, _, _ in statuses(site)] == ["requires_action"]  # a start resumes none

        async def approve() -> str:
            frames: list[str] = []
            async with socket_of(restarted, session, conversation) as ws:
                await ws.send(
                    json.dumps({"action": "decide", "run": run, "call": call, "verdict": "approve"})
                )
                async with asyncio.timeout(20):
                    while 'data-running="false"' not in (frame := str(await ws.recv())):
                        frames.append(frame)
                frames.append(frame)
            return "".join(frames)

        final = asyncio.run(approve())
        assert "pill-completed" in final
        assert restarted.errors() == []
    ((status, resumes, worker),) = statuses(site)
    assert server.process is not None and f":{server.process.pid}:" not in str(worker)
    assert (status, resumes) == ("completed", 0) and worker  # the new process ran it
    assert rows(site, "select approval, status from chat_toolcall") == [("approved", "completed")]
    roles = [r for (r,) in rows(site, "select role from chat_message order by `index`")]
    assert roles == ["user", "assistant", "tool", "assistant"]
    leases = rows(site, "select outcome from chat_runlease order by id")
    assert leases == [("waiting",), ("finished",)]
