"""The transport side of one MCP connection: streams that tell the connection at once when the
server is gone, a session that refuses what this client does not do, and a stdio server's
stderr on this process's own.

This module imports the SDK and its HTTP client; `chat.agent.mcp` imports it only to connect.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TextIO

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp import types as mcp_types
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import MCP_SESSION_ID, streamable_http_client

from .mcp import CONNECT_TIMEOUT, MAX_EVENT_BYTES, ServerConfig

NO_SAMPLING = "this client does not support sampling (the server asked the model to write text)"
NO_ELICITATION = "this client does not support elicitation (the server asked the user for input)"


class Link:
    """One connection attempt's transport as its connection sees it: lost or not, and why.
    The first loss is told to `on_lost` as it happens, not at the next ping."""

    def __init__(self, on_lost: Callable[[Link], None] | None = None) -> None:
        self.lost = ""
        self._on_lost = on_lost

    def lose(self, reason: str) -> None:
        if self.lost:
            return
        self.lost = reason
        if self._on_lost is not None:
            self._on_lost(self)


@dataclass
class CallTrace:
    """What the HTTP transport saw of one call's own request: its status, and whether the
    server answered that it does not know the session (so it ran nothing)."""

    status: int = 0
    session_unknown: bool = False


_call: ContextVar[CallTrace | None] = ContextVar("mcp_call", default=None)


@contextlib.contextmanager
def traced() -> Iterator[CallTrace]:
    """Trace the requests this task sends meanwhile. The SDK hands each message to the HTTP
    transport with the sender's context, so the client's response hook sees this trace."""
    trace = CallTrace()
    token = _call.set(trace)
    try:
        yield trace
    finally:
        _call.reset(token)


def _session_hook(link: Link) -> Callable[[httpx2.Response], Awaitable[None]]:
    """A response hook: 404 (the specification's answer) or 400 with a session complaint (as
    some servers answer) to a request naming a session means the server forgot it."""

    async def hook(response: httpx2.Response) -> None:
        trace = _call.get()
        if trace is not None and response.request.method == "POST":
            trace.status = response.status_code
        if response.status_code not in (400, 404) or MCP_SESSION_ID not in response.request.headers:
            return
        if response.status_code == 400 and b"session" not in (await response.aread()).lower():
            return
        if trace is not None:
            trace.session_unknown = True
        link.lose(f"the server no longer knows the session (HTTP {response.status_code})")

    return hook


class WatchedStream:
    """A transport's read stream that tells its link when it ends: for stdio, the server
    process has exited (its stdout closed)."""

    def __init__(self, stream: Any, link: Link, reason: str) -> None:
        self._stream = stream
        self._link = link
        self._reason = reason

    @property
    def last_context(self) -> Any:
        return getattr(self._stream, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._link.lose(self._reason)
            raise

    def __aiter__(self) -> WatchedStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> WatchedStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class StderrCopy:
    """A pipe for a stdio server's stderr: a thread copies each line to this process's stderr
    as `mcp NAME: line`, and ends (closing its end) when the server's end closes."""

    def __init__(self, name: str) -> None:
        read, write = os.pipe()
        self.writer: TextIO = open(write, "w", encoding="utf-8")  # noqa: SIM115 (closed by close)
        self._prefix = f"mcp {name}: "
        thread = threading.Thread(
            target=self._copy, args=(read,), name=f"mcp {name} stderr", daemon=True
        )
        thread.start()

    def _copy(self, fd: int) -> None:
        with open(fd, "rb") as lines:
            for line in lines:
                text = line.decode(errors="replace").rstrip("\r\n")
                sys.stderr.write(f"{self._prefix}{text}\n")
                sys.stderr.flush()

    def close(self) -> None:
        """Close this process's copy of the writing end (the server holds its own)."""
        self.writer.close()


@contextlib.asynccontextmanager
async def open_streams(config: ServerConfig, link: Link | None = None) -> AsyncIterator[Any]:
    """The transport's (read, write) streams; `link` hears when they are lost."""
    link = link or Link()
    if config.url:
        hooks = {"response": [_session_hook(link)]}
        async with (
            httpx2.AsyncClient(
                headers=dict(config.headers), timeout=CONNECT_TIMEOUT, event_hooks=hooks
            ) as http,
            streamable_http_client(
                config.url, http_client=http, max_sse_event_size=MAX_EVENT_BYTES
            ) as (read, write),
        ):
            yield WatchedStream(read, link, "the connection closed"), write
        return
    parameters = StdioServerParameters(
        command=config.command, args=list(config.args), env=dict(config.env) or None
    )
    stderr = StderrCopy(config.name)
    try:
        async with stdio_client(parameters, errlog=stderr.writer) as (read, write):
            stderr.close()  # the server has its own copy now
            yield WatchedStream(read, link, "the server process exited"), write
    finally:
        stderr.close()


async def _no_sampling(
    context: ClientRequestContext, params: mcp_types.CreateMessageRequestParams
) -> mcp_types.ErrorData:
    return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=NO_SAMPLING)


async def _no_elicitation(
    context: ClientRequestContext, params: mcp_types.ElicitRequestParams
) -> mcp_types.ErrorData:
    return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=NO_ELICITATION)


class Session(ClientSession):
    """The SDK's client session, refusing sampling and elicitation with a reason the tool's
    error then carries. It does not offer them in `initialize` either, so a server that asks
    first may do without."""

    def __init__(self, read: Any, write: Any, message_handler: Any = None) -> None:
        super().__init__(
            read,
            write,
            sampling_callback=_no_sampling,
            elicitation_callback=_no_elicitation,
            message_handler=message_handler,
        )

    def _build_capabilities(self, version: str) -> mcp_types.ClientCapabilities:
        capabilities = super()._build_capabilities(version)
        return capabilities.model_copy(update={"sampling": None, "elicitation": None})
