"""The scale-out channel layer: channels-redis' pub/sub layer, delivering at once to a process
that was idle. Apart from the embedded layer so that an embedded site never imports Redis."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels_redis.pubsub import RedisPubSubChannelLayer, RedisSingleShardConnection

logger = logging.getLogger(__name__)


class PubSubChannelLayer(RedisPubSubChannelLayer):  # type: ignore[misc]  # untyped
    """RedisPubSubChannelLayer whose reader starts reading as soon as the process subscribes.

    The stock reader sleeps 100 ms at a time while its process has no subscription, and its
    first turn comes before the first SUBSCRIBE is done: the first frames to a socket that
    opened on an idle process arrived 70-100 ms late.
    """

    def _get_layer(self) -> Any:
        layer = super()._get_layer()
        if not isinstance(layer._shards[0], WakingShard):
            layer._shards = [WakingShard(shard.host, layer) for shard in layer._shards]
        return layer


class WakingShard(RedisSingleShardConnection):  # type: ignore[misc]  # untyped
    """One Redis connection of the pub/sub layer; its reader waits for a subscription."""

    def __init__(self, host: Any, channel_layer: Any) -> None:
        super().__init__(host, channel_layer)
        self._subscribed = asyncio.Event()

    async def subscribe(self, channel: str) -> None:
        await super().subscribe(channel)
        self._subscribed.set()

    async def _do_receiving(self) -> None:
        while True:
            try:
                if self._pubsub is None or not self._pubsub.subscribed:
                    self._subscribed.clear()
                    await self._subscribed.wait()
                    continue
                message = await self._pubsub.get_message(
                    ignore_subscribe_messages=True, timeout=0.1
                )
                self._receive_message(message)
            except Exception:
                logger.exception("Redis pub/sub: reading failed")
                await asyncio.sleep(1)
