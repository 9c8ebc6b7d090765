"""The Redis pub/sub layer as the site configures it, between two layers standing for two
processes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.utils.module_loading import import_string
from redis import asyncio as aioredis

from agentlab_site.settings import redis_channel_layer
from tests.scaleout.conftest import REDIS

pytestmark = pytest.mark.scaleout
GROUP = "conversation.1"


def make_layer(url: str) -> Any:
    config = redis_channel_layer(url)
    return import_string(config["BACKEND"])(**config["CONFIG"])


async def joined(layer: Any, url: str) -> str:
    """A new channel in GROUP, once Redis has the subscription: group_add sends SUBSCRIBE
    without waiting for the answer, and a message published before it is lost."""
    channel: str = await layer.new_channel()
    await layer.group_add(GROUP, channel)
    name = layer._get_layer()._get_group_channel_name(GROUP)  # channels_redis' naming
    client = aioredis.Redis.from_url(url)
    try:
        async with asyncio.timeout(5):
            while True:
                [(_, subscribers)] = await client.pubsub_numsub(name)
                if subscribers:
                    break
                await asyncio.sleep(0.01)
    finally:
        await client.aclose()
    return channel


@pytest.fixture
async def two() -> AsyncIterator[tuple[Any, Any]]:
    """Two layers on the test Redis: each has its own connections, as a process has."""
    layers = make_layer(REDIS), make_layer(REDIS)
    yield layers
    for layer in layers:
        await layer.flush()


async def test_a_send_to_one_socket_keeps_its_place_among_the_group_frames(
    two: tuple[Any, Any],
) -> None:
    """Catch-up: the snapshot a run's process sends to one socket arrives after the frames
    published before it and before those published after."""
    runs_process, sockets_process = two
    channel = await joined(sockets_process, REDIS)

    for number in range(50):
        if number == 25:
            await runs_process.send(channel, {"type": "x", "n": "snapshot"})
        await runs_process.group_send(GROUP, {"type": "x", "n": number})

    received = [(await sockets_process.receive(channel))["n"] for _ in range(51)]
    assert received == [*range(25), "snapshot", *range(25, 50)]


async def test_sites_on_two_redis_databases_do_not_hear_each_other(
    two: tuple[Any, Any],
) -> None:
    here, _ = two
    other_database = urlsplit(REDIS)._replace(path="/15", query="").geturl()
    elsewhere = make_layer(other_database)
    try:
        mine = await joined(here, REDIS)
        theirs = await joined(elsewhere, other_database)
        await elsewhere.group_send(GROUP, {"type": "x", "n": "theirs"})
        await here.group_send(GROUP, {"type": "x", "n": "mine"})

        assert (await here.receive(mine))["n"] == "mine"
        assert (await elsewhere.receive(theirs))["n"] == "theirs"
    finally:
        await elsewhere.flush()


async def test_a_process_left_without_sockets_reads_the_next_one_at_once(
    two: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """channels-redis' own reader sleeps 100 ms at a time while its process subscribes to
    nothing (and on its first turn): the first frames to a socket opened there came late."""
    polls: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float, *args: Any) -> Any:
        if delay == 0.1:
            polls.append(delay)
        return await real_sleep(delay, *args)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    runs_process, sockets_process = two
    for number in range(3):
        channel = await joined(sockets_process, REDIS)
        await runs_process.group_send(GROUP, {"type": "x", "n": number})
        assert (await sockets_process.receive(channel))["n"] == number
        # The socket closes: its receive is cancelled, which unsubscribes its channel.
        await sockets_process.group_discard(GROUP, channel)
        waiting = asyncio.ensure_future(sockets_process.receive(channel))
        await real_sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await real_sleep(0.25)
    assert polls == []
