from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest
import websockets

from chat.consumers import CLOSE_NOT_FOUND
from chat.testing.processes import DaphneServer
from chat.testing.site import Site
from chat.testing.sockets import DONE, streamed_text

pytestmark = pytest.mark.scaleout
Sockets = tuple[websockets.ClientConnection, websockets.ClientConnection]
Pair = tuple[DaphneServer, DaphneServer]
REASONING = re.compile(r'-reasoning" hx-swap-oob="beforeend">(.*?)</span>', re.S)


@asynccontextmanager
async def socket(
    server: DaphneServer, session: str, conversation: int
) -> AsyncIterator[websockets.ClientConnection]:
    async with websockets.connect(
        server.websocket_url(conversation),
        origin=server.url,
        additional_headers={"Cookie": f"sessionid={session}"},
    ) as ws:
        yield ws


@pytest.fixture(scope="module")
def pair(site: Site) -> Iterator[Pair]:
    """Two daphne processes of the site, shared by the module's tests (each test has its own
    user and conversation; the test that kills a process starts processes of its own)."""
    with site.daphne() as a, site.daphne() as b:
        yield a, b


@asynccontextmanager
async def on_two_processes(pair: Pair, session: str, conversation: int) -> AsyncIterator[Sockets]:
    """A socket on the conversation through each of the two daphne processes."""
    a, b = pair
    async with (
        socket(a, session, conversation) as on_a,
        socket(b, session, conversation) as on_b,
    ):
        yield on_a, on_b


_SLOW_RUNS = """
from chat.models import Conversation
conversation = Conversation.objects.get(pk={conversation})
parameters = conversation.agent_parameters()
policies = {{**parameters.tool_policies, "slow_lookup": "run"}}
conversation.set_agent_parameters(parameters.model_copy(update={{"tool_policies": policies}}))
conversation.save(update_fields=["parameters"])
"""


def user_and_conversation(site: Site, username: str) -> tuple[str, int]:
    """A user's session key and its one conversation, where the slow lookup (not read-only:
    it would ask first) runs without asking: these tests are about processes, not approvals."""
    session, (conversation,) = site.make_conversations(1, username)
    site.manage("shell", stdin=_SLOW_RUNS.format(conversation=conversation))
    return session, conversation


async def frames_until(ws: websockets.ClientConnection, marker: str, wait: float = 15) -> list[str]:
    frames: list[str] = []
    async with asyncio.timeout(wait):
        while not frames or marker not in frames[-1]:
            frames.append(str(await ws.recv()))
    return frames


async def send(ws: websockets.ClientConnection, message: str) -> None:
    await ws.send(json.dumps({"action": "send", "message": message}))


def test_a_socket_on_one_process_watches_a_run_started_through_another(
    site: Site, pair: Pair
) -> None:
    session, conversation = user_and_conversation(site, "ada")

    async def scenario() -> None:
        async with on_two_processes(pair, session, conversation) as (on_a, on_b):
            await send(on_b, "What time is it? Also search the cards for pills")
            frames = await frames_until(on_a, DONE)
        everything = "".join(frames)
        assert "What time is it? Also search the cards for pills" in everything
        assert "Looking up:" in everything
        final = frames[-1]
        assert "Get current time" in final and "Search cards" in final
        assert "Here is what the tools said" in final
        assert "Here is what" in streamed_text(frames)

    asyncio.run(scenario())
    mine = f"where conversation_id = {conversation}"
    assert site.sql(f"select status from chat_run {mine}") == [("completed",)]


def test_a_socket_on_the_runs_own_process_streams_while_the_run_is_in_progress(
    site: Site, pair: Pair
) -> None:
    """The run's control channel must not hold the process's channel reads for the whole run
    (it did with the list-based Redis layer and a prefix of its own)."""
    session, conversation = user_and_conversation(site, "barbara")

    async def scenario() -> list[tuple[float, str]]:
        async with socket(pair[1], session, conversation) as on_b:
            await send(on_b, "please do a slow lookup")
            arrivals: list[tuple[float, str]] = []
            async with asyncio.timeout(15):
                while not arrivals or DONE not in arrivals[-1][1]:
                    frame = str(await on_b.recv())
                    arrivals.append((asyncio.get_running_loop().time(), frame))
            return arrivals

    arrivals = asyncio.run(scenario())
    done_at = arrivals[-1][0]
    indicator_at = next(at for at, frame in arrivals if "Looking up: Slow lookup" in frame)
    # The tool sleeps 1.5 s: the indicator must be on screen for most of it, not flushed at the end.
    assert done_at - indicator_at > 1.0
    assert "Slow lookup" in arrivals[-1][1]


def test_a_socket_idle_for_longer_than_redis_pys_read_timeout_still_works(
    site: Site, pair: Pair
) -> None:
    """redis-py 8 ends a read after 5 s by default: a layer read that waits longer for the next
    message must not crash the socket (the list-based layer's blocking read did)."""
    session, conversation = user_and_conversation(site, "edsger")

    async def scenario() -> str:
        async with socket(pair[0], session, conversation) as on_a:
            await asyncio.sleep(6.5)
            await send(on_a, "still there?")
            return (await frames_until(on_a, DONE))[-1]

    assert "still there?" in asyncio.run(scenario())


def test_a_reply_streamed_by_one_process_reaches_the_other_complete_and_in_order(
    site: Site, pair: Pair
) -> None:
    session, conversation = user_and_conversation(site, "hedy")
    prompt = "Repeat after me " + " ".join(f"word{n}" for n in range(25))

    async def scenario() -> tuple[list[str], list[str]]:
        async with on_two_processes(pair, session, conversation) as (on_a, on_b):
            await send(on_b, prompt)
            return await frames_until(on_a, DONE), await frames_until(on_b, DONE)

    on_a, on_b = asyncio.run(scenario())
    [(reply,)] = site.sql(
        f"select content from chat_message where conversation_id = {conversation} "
        "and role = 'assistant'"
    )
    assert "word24" in reply
    assert html.unescape(streamed_text(on_a)) == reply == html.unescape(streamed_text(on_b))


def test_a_socket_opened_mid_run_on_another_process_catches_up(site: Site, pair: Pair) -> None:
    """The run's process answers the catch-up request with a snapshot sent to the new socket's
    own channel, in its place among the group's frames: nothing missing, nothing twice."""
    session, conversation = user_and_conversation(site, "katherine")

    async def scenario() -> tuple[list[str], list[str]]:
        a, b = pair
        async with socket(b, session, conversation) as on_b:
            await send(on_b, "please do a slow lookup")
            seen_on_b = await frames_until(on_b, "Looking up: Slow lookup")
            async with socket(a, session, conversation) as late:
                frames = await frames_until(late, DONE)
            return seen_on_b + await frames_until(on_b, DONE), frames

    on_b, late = asyncio.run(scenario())
    snapshot, *after = late
    assert 'class="message assistant streaming"' in snapshot
    assert "Looking up: Slow lookup" in snapshot
    caught_up = re.search(r'id="reply-\d+-reasoning">(.*?)</div>', snapshot, re.S)
    assert caught_up and "the tools answer that better" in caught_up.group(1)
    assert caught_up.group(1) == "".join(REASONING.findall("".join(on_b)))
    replies = site.sql(
        f"select content from chat_message where conversation_id = {conversation} "
        "and role = 'assistant' order by index"
    )
    assert replies[-1][0].startswith("Here is what the tools said")
    assert html.unescape(streamed_text(after)) == replies[-1][0]
    assert "Slow lookup" in after[-1]


def test_unsharing_through_one_process_closes_a_readers_socket_on_the_other(
    site: Site, pair: Pair
) -> None:
    owner, conversation = user_and_conversation(site, "ada_lovelace")
    reader, _ = site.make_conversations(0, "bob")

    async def share(server: DaphneServer, on: bool) -> None:
        async with httpx.AsyncClient(base_url=server.url, cookies={"sessionid": owner}) as http:
            await http.get(f"/c/{conversation}/")
            response = await http.post(
                f"/c/{conversation}/share/",
                data={"shared": "on"} if on else {},
                headers={"X-CSRFToken": http.cookies["csrftoken"]},
            )
            assert response.status_code == 302

    async def scenario() -> tuple[str, int | None]:
        a, b = pair
        await share(b, on=True)
        async with socket(a, reader, conversation) as on_a:
            await share(b, on=False)
            notice = str(await asyncio.wait_for(on_a.recv(), 5))
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(on_a.recv(), 5)
            return notice, on_a.close_code

    notice, code = asyncio.run(scenario())
    assert "The owner stopped sharing this conversation." in notice
    assert code == CLOSE_NOT_FOUND


def test_stop_from_one_process_ends_a_run_owned_by_another(site: Site, pair: Pair) -> None:
    session, conversation = user_and_conversation(site, "grace")

    async def scenario() -> str:
        async with on_two_processes(pair, session, conversation) as (on_a, on_b):
            await send(on_b, "please do a slow lookup")
            await frames_until(on_a, "Looking up: Slow lookup")
            await on_a.send(json.dumps({"action": "cancel"}))
            return (await frames_until(on_a, DONE, wait=5))[-1]

    final = asyncio.run(scenario())
    assert "Cancelled by the user" in final
    rows = site.sql(
        f"select status from chat_run where conversation_id = {conversation} order by id"
    )
    assert rows == [("cancelled",)]


def test_a_killed_process_leaves_the_run_interrupted_and_repaired(site: Site) -> None:
    session, conversation = user_and_conversation(site, "linus")

    async def scenario() -> str:
        with site.daphne() as a, site.daphne() as b:
            async with socket(a, session, conversation) as on_a:
                async with socket(b, session, conversation) as on_b:
                    await send(on_b, "please do a slow lookup")
                    await frames_until(on_a, "Looking up: Slow lookup")
                    b.kill()
                await send(on_a, "are you still there?")
                return (await frames_until(on_a, DONE))[-1]

    final = asyncio.run(scenario())
    assert "are you still there?" in final or "You said" in final
    runs = site.sql(
        f"select status, error from chat_run where conversation_id = {conversation} order by id"
    )
    assert runs[0][0] == "interrupted" and "stopped" in str(runs[0][1])
    assert runs[1][0] == "completed"
    messages = site.sql(
        "select role, tool_call_id, content from chat_message "
        f"where conversation_id = {conversation} order by index"
    )
    roles = [row[0] for row in messages]
    assert roles == ["user", "assistant", "tool", "user", "assistant"]
    assert "Interrupted" in str(messages[2][2])


def test_a_burst_of_sends_through_two_processes_starts_one_run(site: Site, pair: Pair) -> None:
    """Three sockets on each of two processes send at the same moment: one run, in any process."""
    session, conversation = user_and_conversation(site, "burst")

    async def scenario() -> None:
        a, b = pair
        async with (
            socket(a, session, conversation) as a1,
            socket(a, session, conversation) as a2,
            socket(a, session, conversation) as a3,
            socket(b, session, conversation) as b1,
            socket(b, session, conversation) as b2,
            socket(b, session, conversation) as b3,
        ):
            sockets = [a1, b1, a2, b2, a3, b3]
            await asyncio.gather(
                *(send(ws, f"What time is it? ({n})") for n, ws in enumerate(sockets))
            )
            await frames_until(a1, DONE)

    asyncio.run(scenario())
    mine = f"where conversation_id = {conversation}"
    assert site.sql(f"select status from chat_run {mine}") == [("completed",)]
    roles = [role for (role,) in site.sql(f"select role from chat_message {mine} order by index")]
    assert roles == ["user", "assistant", "tool", "assistant"]
