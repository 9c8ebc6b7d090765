"""A running tool call on the page: what the "Looking up" indicator says of it ("Research · 40%
· 3 s"), and how often it is sent: at most UPDATES_PER_SECOND frames per call, the last report
always shown (a server may report a hundred times a second). Its seconds cost no frames: the
server says how long the call has run whenever it renders the line, and the page counts on
(static/js/elapsed.js)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from chat.agent.events import ToolCallProgress
from chat.agent.tools import humanize

logger = logging.getLogger(__name__)
UPDATES_PER_SECOND = 4
MESSAGE_CHARS = 80
Send = Callable[[], Awaitable[None]]


def progress_text(event: ToolCallProgress) -> str:
    """How far a call is: a percentage when the total is known, else its message, else the
    count it reported."""
    progress, total = event.progress, event.total
    if total and total > 0 and math.isfinite(progress / total):
        return f"{min(100, max(0, math.floor(100 * progress / total)))}%"
    if event.message and event.message.strip():
        message = " ".join(event.message.split())
        return message if len(message) <= MESSAGE_CHARS else message[: MESSAGE_CHARS - 1] + "…"
    return f"{progress:g}"


def indicator_label(name: str, progress: ToolCallProgress | None) -> str:
    """One running call in the indicator: its display name, and how far it is when it said."""
    label = humanize(name)
    return f"{label} · {progress_text(progress)}" if progress is not None else label


def elapsed_text(seconds: float) -> str:
    """How long a call has run, in whole seconds: "3 s", "2 min 5 s" (static/js/elapsed.js
    says it the same way as it counts on)."""
    minutes, rest = divmod(max(0, int(seconds)), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


@dataclass(frozen=True, slots=True)
class RunningCall:
    """A call the indicator names while it runs: its label, when it started, and how long it
    had run when the line was rendered."""

    label: str
    started: datetime
    seconds: float

    @property
    def elapsed_text(self) -> str:
        return elapsed_text(self.seconds)

    @property
    def elapsed_ms(self) -> int:
        return int(self.seconds * 1000)


def running_call(
    name: str, started: datetime, progress: ToolCallProgress | None, now: datetime
) -> RunningCall:
    seconds = max(0.0, (now - started).total_seconds())
    return RunningCall(indicator_label(name, progress), started, seconds)


class Pacer:
    """Per key (a call id), at most one send per `interval`: an offer within it is sent at
    its end, once, with the latest `send` offered (so the last report is always shown)."""

    def __init__(self, interval: float = 1 / UPDATES_PER_SECOND) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._due: dict[str, tuple[asyncio.TimerHandle, list[Send]]] = {}
        self._sending: set[asyncio.Task[None]] = set()

    async def offer(self, key: str, send: Send) -> None:
        due = self._due.get(key)
        if due is not None:
            due[1][0] = send  # the send already due takes the latest state
            return
        wait = self._last.get(key, -math.inf) + self.interval - time.monotonic()
        if wait <= 0:
            self._last[key] = time.monotonic()
            await send()
            return
        latest = [send]
        timer = asyncio.get_running_loop().call_later(wait, self._send_due, key)
        self._due[key] = (timer, latest)

    def _send_due(self, key: str) -> None:
        _, latest = self._due.pop(key)
        self._last[key] = time.monotonic()
        task = asyncio.ensure_future(self._send(latest[0]))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    @staticmethod
    async def _send(send: Send) -> None:
        try:
            await send()
        except Exception:
            logger.exception("a tool call's progress was not sent")

    def forget(self, key: str) -> None:
        """The call is over: nothing more of it is sent."""
        due = self._due.pop(key, None)
        if due is not None:
            due[0].cancel()
        self._last.pop(key, None)

    def close(self) -> None:
        for key in list(self._due):
            self.forget(key)
