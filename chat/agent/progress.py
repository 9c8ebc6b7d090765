"""A tool call's progress: a handler reports it (`report_progress`, or `progress_callback` for
progress heard in another task, such as an MCP session's) and the run hears it as
ToolCallProgress events. Handlers stay `(arguments) -> result`: the reporter of the call being
executed lives in a context variable that EventAgent sets around each call."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Protocol

from .events import ToolCallProgress


class ProgressCallback(Protocol):
    """An async callback hearing progress, as an MCP session calls it (chat.agent.mcp.Progress)."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


Reporter = Callable[[float, float | None, str | None], None]
Hear = Callable[[ToolCallProgress], None]
_reporter: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar(
    "tool_progress", default=None
)


def report_progress(
    progress: float, total: float | None = None, message: str | None = None
) -> None:
    """For a tool handler: say how far the call it executes is (the page shows it). Outside a
    call EventAgent executes, it does nothing; any thread may call it."""
    reporter = _reporter.get()
    if reporter is not None:
        reporter(progress, total, message)


def progress_callback() -> ProgressCallback:
    """For a handler whose progress is heard in another task (an MCP session's): an async
    callback that reports it for the call executed now."""
    reporter = _reporter.get()

    async def report(progress: float, total: float | None, message: str | None) -> None:
        if reporter is not None:
            reporter(progress, total, message)

    return report


@contextlib.contextmanager
def reporting(call_id: str, hear: Hear | None) -> Iterator[None]:
    """While a call executes: what its handler reports reaches `hear` in this event loop, from
    any thread (without `hear`, reports go nowhere)."""
    token = _reporter.set(None if hear is None else _bound(call_id, hear))
    try:
        yield
    finally:
        _reporter.reset(token)


def _bound(call_id: str, hear: Hear) -> Reporter:
    loop = asyncio.get_running_loop()

    def report(progress: float, total: float | None, message: str | None) -> None:
        event = ToolCallProgress(call_id, progress, total, message)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is listening
            loop.call_soon_threadsafe(hear, event)

    return report
