"""A rolling deploy of a site's daphne processes, and clients that follow a run through it.

`Fleet.roll` stops each process in turn (SIGTERM, as a deploy does; SIGKILL, as a crash) and
starts it again on its port; `follow` sends a message through one process and reads the run's
frames until it ends, reconnecting to another process whenever its socket goes down, as the
page does. The tests (tests/scaleout/test_rolling_restart.py) and the benchmark share both.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import websockets
from websockets.typing import Origin

from chat.testing.processes import DaphneServer
from chat.testing.sockets import DONE

_RUN = re.compile(r'id="reply-(\d+)-')


@dataclass(frozen=True)
class Restart:
    """One process stopped and started again: how long each took, how it exited."""

    port: int
    signal: int
    stop_seconds: float
    start_seconds: float
    returncode: int | None


class Fleet:
    """The daphne processes of one site; those being restarted are not `live`."""

    def __init__(self, servers: Sequence[DaphneServer]) -> None:
        self.servers = list(servers)
        self.down: set[int] = set()

    def live(self) -> list[DaphneServer]:
        return [server for server in self.servers if server.port not in self.down]

    async def another(self, than: DaphneServer | None = None) -> DaphneServer:
        """A live process, other than `than` when there is one; waits while none is live."""
        while True:
            live = self.live()
            others = [server for server in live if server is not than]
            if others or live:
                return (others or live)[0]
            await asyncio.sleep(0.05)

    def stop(self, server: DaphneServer, sig: int = signal.SIGTERM) -> float:
        """Take `server` out of the fleet and stop it with `sig`; the seconds it took to exit."""
        self.down.add(server.port)
        started = time.monotonic()
        server.stop(sig)
        return time.monotonic() - started

    def start(self, server: DaphneServer) -> float:
        """Start `server` again on its port; the seconds until it served."""
        started = time.monotonic()
        server.start()
        self.down.discard(server.port)
        return time.monotonic() - started

    def restart(self, server: DaphneServer, sig: int = signal.SIGTERM) -> Restart:
        """Stop and start one process (blocking: run it in a thread beside the clients)."""
        stopped = self.stop(server, sig)
        returncode = server.process.returncode if server.process else None
        return Restart(server.port, sig, stopped, self.start(server), returncode)

    def roll(self, sig: int = signal.SIGTERM) -> list[Restart]:
        """A rolling deploy: every process in turn, the next once the last one serves again."""
        return [self.restart(server, sig) for server in self.servers]


@dataclass
class Followed:
    """What a client saw of one run: every frame, the sockets it took, whether it ended."""

    conversation: int
    frames: list[str] = field(default_factory=list)
    sockets: int = 0
    run: int | None = None
    finished_at: float | None = None

    @property
    def done(self) -> bool:
        return self.finished_at is not None

    @property
    def final(self) -> str:
        """The frame that ended the run ("" if none did)."""
        return self.frames[-1] if self.done else ""


async def follow(
    fleet: Fleet,
    first: DaphneServer,
    session: str,
    conversation: int,
    message: str,
    *,
    limit: float = 120,
) -> Followed:
    """Send `message` through `first` and read until the run ends; whenever the socket goes
    down, reconnect to another live process (saying which run the page showed, so a run that
    ended meanwhile is shown ended). Stops reading after `limit` seconds."""
    seen = Followed(conversation)
    server = first
    pending: str | None = message
    try:
        async with asyncio.timeout(limit):
            while True:
                url = server.websocket_url(conversation)
                if seen.run is not None:
                    url += f"?live={seen.run}"
                try:
                    async with websockets.connect(
                        url,
                        origin=Origin(server.url),
                        additional_headers={"Cookie": f"sessionid={session}"},
                        max_size=None,
                        ping_interval=None,
                    ) as ws:
                        seen.sockets += 1
                        if pending is not None:
                            await ws.send(json.dumps({"action": "send", "message": pending}))
                            pending = None
                        async for frame in ws:
                            text = str(frame)
                            seen.frames.append(text)
                            if seen.run is None and (found := _RUN.search(text)):
                                seen.run = int(found.group(1))
                            if DONE in text:
                                seen.finished_at = time.monotonic()
                                return seen
                except (OSError, websockets.ConnectionClosed, websockets.InvalidHandshake):
                    await asyncio.sleep(0.1)
                server = await fleet.another(server)
    except TimeoutError:
        pass
    return seen
