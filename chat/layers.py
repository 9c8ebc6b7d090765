"""The embedded channel layer: Channels' in-memory layer, made to scale with the socket count."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer

CLEAN_EVERY = 1.0


class LocalChannelLayer(InMemoryChannelLayer):
    """InMemoryChannelLayer with expiry sweeps at most once a second and direct group sends.

    The stock layer sweeps every channel and group for expired entries on each send to a group
    and each receive, and sends to a group through one task per member: with 200 sockets that
    was a sixth of the process's time. Expiry is measured in seconds (a minute for messages,
    a day for group membership), so a sweep a second keeps its meaning.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cleaned = 0.0

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._cleaned >= CLEAN_EVERY:
            self._cleaned = now
            super()._clean_expired()  # type: ignore[misc]  # private, in channels' layer

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert isinstance(message, dict), "Message is not a dict"
        self.require_valid_group_name(group)
        self._clean_expired()
        for channel in list(self.groups.get(group, ())):
            # A socket that stopped reading misses frames; the others do not.
            with contextlib.suppress(ChannelFull):
                await self.send(channel, message)
