"""Which run of this process goes first when the loop is busy."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class StartFirst:
    """Runs of this process that have shown nothing yet go before runs that already stream.

    Under a burst of messages, starting a run (its transaction, its first frame, the provider
    request) queued behind every stream already going, and the last conversation of the burst
    waited for all of them. While any run is starting, a streaming run gives way for up to
    HOLD seconds at a time instead of one loop iteration: everyone sees the reply begin, the
    replies already streaming finish a little later.
    """

    HOLD = 0.1

    def __init__(self) -> None:
        self.starting = 0
        self._clear: asyncio.Future[None] | None = None

    def enter(self) -> Callable[[], None]:
        """Count one starting run; call the returned function (as often as you like) to leave."""
        self.starting += 1
        left = False

        def leave() -> None:
            nonlocal left
            if not left:
                left = True
                self.starting -= 1
                if not self.starting:
                    self._release()

        return leave

    def _release(self) -> None:
        clear, self._clear = self._clear, None
        if clear is not None and not clear.done() and not clear.get_loop().is_closed():
            clear.set_result(None)

    async def give_way(self) -> None:
        """Wait until no run is starting, or for HOLD seconds at most."""
        if not self.starting:
            return
        loop = asyncio.get_running_loop()
        if self._clear is None or self._clear.done() or self._clear.get_loop() is not loop:
            self._clear = loop.create_future()
        await asyncio.wait([self._clear], timeout=self.HOLD)


START_FIRST = StartFirst()
