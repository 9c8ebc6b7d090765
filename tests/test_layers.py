"""The embedded channel layer keeps the in-memory layer's behaviour at a fraction of the cost."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import get_channel_layer

from agentlab_site.settings import redis_channel_layer
from chat import layers
from chat.layers import LocalChannelLayer


def test_the_site_uses_it() -> None:
    assert isinstance(get_channel_layer(), LocalChannelLayer)


def test_with_redis_the_site_uses_pub_sub_with_the_database_in_its_names() -> None:
    """Redis pub/sub ignores the database number; sites on two databases must not mix."""
    assert redis_channel_layer("redis://cache.internal:6379/3") == {
        "BACKEND": "chat.redis_layer.PubSubChannelLayer",
        "CONFIG": {"hosts": ["redis://cache.internal:6379/3"], "prefix": "agentlab.3."},
    }
    prefixes = [
        redis_channel_layer(url)["CONFIG"]["prefix"]
        for url in ["redis://cache:6379", "redis://cache:6379/0", "unix:///run/redis.sock?db=6"]
    ]
    assert prefixes == ["agentlab.0.", "agentlab.0.", "agentlab.6."]


async def test_a_group_send_reaches_every_member_in_order() -> None:
    layer = LocalChannelLayer()
    channels = [await layer.new_channel() for _ in range(3)]
    for channel in channels:
        await layer.group_add("conversation.1", channel)
    await layer.group_add("conversation.2", await layer.new_channel())

    for number in range(3):
        await layer.group_send("conversation.1", {"type": "chat.fragment", "n": number})

    for channel in channels:
        received = [(await layer.receive(channel))["n"] for _ in range(3)]
        assert received == [0, 1, 2]


async def test_a_full_channel_misses_frames_without_stopping_the_others() -> None:
    layer = LocalChannelLayer(capacity=2)
    stalled, reading = await layer.new_channel(), await layer.new_channel()
    for channel in (stalled, reading):
        await layer.group_add("g", channel)

    for number in range(4):
        await layer.group_send("g", {"type": "x", "n": number})
        assert (await layer.receive(reading))["n"] == number

    assert [(await layer.receive(stalled))["n"] for _ in range(2)] == [0, 1]


async def test_expired_messages_and_their_channels_are_still_swept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(layers, "CLEAN_EVERY", 0.05)
    layer = LocalChannelLayer(expiry=0.01)
    gone, alive = await layer.new_channel(), await layer.new_channel()
    await layer.group_add("g", gone)
    await layer.group_add("g", alive)
    await layer.group_send("g", {"type": "x"})
    await layer.receive(alive)

    await asyncio.sleep(0.1)
    await layer.group_send("g", {"type": "y"})

    assert gone not in layer.groups["g"]  # its message expired unread: dropped from the group
    assert (await layer.receive(alive))["type"] == "y"
