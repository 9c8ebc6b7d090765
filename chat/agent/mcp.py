"""MCP servers as tool sources: one long-lived connection per server, its tools, its calls.

Pure Python over the official `mcp` SDK (2.x). The SDK's client contexts are anyio task groups
that must be entered and left in one task, so each `Connection` has a task that owns its
session; calls from any task go through that session while it is open. The owner reconnects
(and so restarts a stdio server) as soon as the transport says the server is gone, then with a
growing pause that a new `start` cuts short.

The SDK (and its HTTP client, in `mcp_session`) is imported by the code that connects, not by
this module: the models, the admin and every command read the names here, and importing the
SDK costs a command more start-up time than its own work.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import logging
import re
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp import types as mcp_types

    from .mcp_session import Link

from .mcp_lists import ServerPrompt, ServerTool, list_prompts, list_tools

__all__ = ["ServerPrompt", "ServerTool"]  # what a server lists, named with its connection

logger = logging.getLogger(__name__)

SEPARATOR = "__"
"""Between the server's and the tool's name in the name the model sees: `docs__search_docs`."""
NAME_CHARS = 64
DEFAULT_TIMEOUT = 60.0
CONNECT_TIMEOUT = 20.0
PING_EVERY = 15.0
RETRY_WAITS = (1.0, 2.0, 5.0, 10.0, 30.0)
MAX_EVENT_BYTES = 32 * 1024 * 1024
"""The largest result a streamable HTTP server may send (the SDK's default is 1 MiB)."""


def load_sdk() -> None:
    """Import the SDK before the first connection needs it.

    A server process does as it starts: the import takes about half a second, which the first
    run with MCP tools would otherwise spend holding up the event loop and every stream on it.
    """
    importlib.import_module(".mcp_session", __package__)  # the SDK, its transports, httpx2


class McpUnavailable(Exception):
    """The server cannot be reached (or stopped answering); the text says why."""


class McpCallFailed(Exception):
    """The server answered a call with a JSON-RPC error: the tool's failure, not the server's
    absence (a task-only tool, a request this client refuses); the text is the server's."""


@dataclass(frozen=True)
class ServerConfig:
    """How to reach one server: streamable HTTP (`url`, `headers`) or stdio (`command`, `args`,
    `env`). Header and environment values are the resolved secrets, never stored."""

    name: str
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    command: str = ""
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"


def _part(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_-]", "_", text).strip("_") or "tool"


def exposed_name(server: str, tool: str, taken: Collection[str] = ()) -> str:
    """The name the model sees: `<server>__<tool>`, within OpenAI's `^[a-zA-Z0-9_-]{1,64}$`.

    Characters outside the rule become `_`; a name too long is cut and ends with a short hash
    of the original pair, so it stays unique and the same every time; a clash with `taken`
    (two originals that sanitise alike) gets the hash too.
    """
    name = f"{_part(server)}{SEPARATOR}{_part(tool)}"
    if len(name) <= NAME_CHARS and name not in taken:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[: NAME_CHARS - 9]}_{digest}"


ToolsChanged = Callable[[list[ServerTool]], Awaitable[None]]


class PromptsChanged(Protocol):
    """Hears that the server's prompt list changed (it asks `list_prompts` itself)."""

    async def __call__(self, connection: Connection) -> None: ...


class Progress(Protocol):
    """Hears a call's progress notifications."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


class Connection:
    """One server for this process: connected on `start`, kept alive, closed on `close`."""

    def __init__(
        self,
        config: ServerConfig,
        on_tools_changed: ToolsChanged | None = None,
        on_prompts_changed: PromptsChanged | None = None,
    ) -> None:
        self.config = config
        self.on_tools_changed = on_tools_changed
        self.on_prompts_changed = on_prompts_changed
        self.tools: list[ServerTool] = []
        self.error = ""
        self.server_name = ""
        self._session: ClientSession | None = None
        self._link: Link | None = None
        self._ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._retry: asyncio.Event | None = None  # set while the owner waits to try again
        self._closing = False
        self._owner: asyncio.Task[None] | None = None
        self._refreshing: set[asyncio.Task[None]] = set()

    @property
    def up(self) -> bool:
        return self._session is not None

    async def start(self) -> None:
        """Connect (or wait for the connection in progress); McpUnavailable saying why not.

        While the owner waits to try again after a failure, it tries at once: a run starting
        then gets the server's tools if it is back."""
        if self._owner is None or self._owner.done():
            self._ready.clear()
            self._owner = asyncio.create_task(self._own(), name=f"mcp {self.config.name}")
        elif not self.up and self._retry is not None:
            self._ready.clear()
            self._retry.set()
        if not self.up:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    await self._ready.wait()
        if not self.up:
            raise McpUnavailable(self.error or "the server did not answer initialize in time")

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._owner is not None:
            self._owner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._owner
        for task in self._refreshing:
            task.cancel()

    async def call(
        self, name: str, arguments: dict[str, Any], *, progress: Progress | None = None
    ) -> mcp_types.CallToolResult:
        """Call a tool. McpUnavailable when the server is down or stops during the call;
        McpCallFailed when it answers with a JSON-RPC error. `progress` hears the server's
        progress notifications for this call.

        A call the server refused because it no longer knows the session (a restarted HTTP
        server) ran nothing: it is sent once more, in a new session."""
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED

        from .mcp_session import traced

        for attempt in (1, 2):
            await self.start()
            session = self._session
            if session is None:
                raise McpUnavailable(self.error or "not connected")
            try:
                with traced() as trace:
                    return await session.call_tool(name, arguments, progress_callback=progress)
            except asyncio.CancelledError:
                raise
            except MCPError as exc:
                message = exc.error.message
                if trace.session_unknown:
                    if attempt == 1:
                        logger.info(
                            "MCP server %s: new session; %s sent again", self.config.name, name
                        )
                        continue
                    raise McpUnavailable(f"the server lost the session again: {message}") from None
                if exc.error.code == CONNECTION_CLOSED:
                    self._broken(exc, session)
                    raise McpUnavailable("the server stopped during the call") from None
                if trace.status in (401, 403) or trace.status >= 500:
                    raise McpUnavailable(f"HTTP {trace.status}: {message}") from None
                raise McpCallFailed(message) from None
            except Exception as exc:
                self._broken(exc, session)
                raise McpUnavailable(
                    f"the server stopped during the call ({_reason(exc)})"
                ) from None
        raise McpUnavailable(self.error or "not connected")

    async def list_tools(self) -> list[ServerTool]:
        await self.start()
        if self._session is None:
            raise McpUnavailable(self.error or "not connected")
        self.tools = await list_tools(self._session)
        return self.tools

    async def list_prompts(self) -> list[ServerPrompt]:
        """The server's prompts (none when it offers no prompts capability)."""
        await self.start()
        if self._session is None:
            raise McpUnavailable(self.error or "not connected")
        return await list_prompts(self._session)

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str]
    ) -> mcp_types.GetPromptResult:
        """A prompt's messages for these arguments; McpUnavailable when the server is down."""
        from mcp.shared.exceptions import MCPError

        await self.start()
        if self._session is None:
            raise McpUnavailable(self.error or "not connected")
        try:
            return await self._session.get_prompt(name, dict(arguments))
        except MCPError as exc:
            raise McpUnavailable(f"the prompt failed: {exc.error.message}") from None

    def _broken(self, exc: BaseException, session: ClientSession) -> None:
        if session is self._session:  # not a reconnection made meanwhile
            self._lost(_reason(exc))

    def _lost(self, reason: str, link: Link | None = None) -> None:
        """The session is over: the next call waits for the reconnection, started now."""
        if link is not None and link is not self._link:
            return  # an earlier connection's transport, already replaced
        self.error = reason
        self._session = None
        self._ready.clear()
        self._wake.set()

    async def _own(self) -> None:
        from .mcp_session import Link, Session, open_streams

        failures = 0
        while not self._closing:
            self._ready.clear()
            link = self._link = Link(lambda lost: self._lost(lost.lost, lost))
            try:
                async with (
                    open_streams(self.config, link) as streams,
                    Session(streams[0], streams[1], message_handler=self._message) as session,
                ):
                    async with asyncio.timeout(CONNECT_TIMEOUT):
                        result = await session.initialize()
                        tools = await list_tools(session)
                    if link.lost:
                        raise McpUnavailable(link.lost)
                    self.server_name = result.server_info.name
                    self.tools, self.error, failures = tools, "", 0
                    self._session = session
                    self._ready.set()
                    await self._watch(session)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                self.error = link.lost or _reason(exc)  # not the noise of the teardown
                logger.info("MCP server %s: %s", self.config.name, self.error)
            finally:
                self._session = self._link = None
            if self._closing:
                return
            if failures:
                await self._pause(RETRY_WAITS[min(failures - 1, len(RETRY_WAITS) - 1)])
            failures += 1  # a server that was up is started again at once, once

    async def _pause(self, seconds: float) -> None:
        """Wait before trying again, or less when `start` asks for the server meanwhile."""
        self._retry = asyncio.Event()
        self._ready.set()  # a waiting `start` learns why
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._retry.wait()
        finally:
            self._retry = None

    async def _watch(self, session: ClientSession) -> None:
        """Hold the session open until closing or a failure. The transport says at once when
        the server goes away; a ping now and then finds a server that stopped answering."""
        while not self._closing and self._session is session:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PING_EVERY):
                    await self._wake.wait()
            if self._wake.is_set():
                self._wake.clear()
                continue
            async with asyncio.timeout(CONNECT_TIMEOUT):
                await session.send_ping()

    async def _message(self, message: Any) -> None:
        from mcp.types import PromptListChangedNotification, ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            task = asyncio.create_task(self._refresh())
        elif isinstance(message, PromptListChangedNotification) and self.on_prompts_changed:
            task = asyncio.create_task(self.on_prompts_changed(self))
        else:
            return
        self._refreshing.add(task)
        task.add_done_callback(self._refreshing.discard)

    async def _refresh(self) -> None:
        try:
            tools = await self.list_tools()
        except Exception as exc:
            logger.info("MCP server %s: tools not refreshed: %s", self.config.name, _reason(exc))
            return
        if self.on_tools_changed is not None:
            await self.on_tools_changed(tools)


def _reason(exc: BaseException) -> str:
    """One line for an error, the first real cause inside an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def probe(config: ServerConfig) -> tuple[str, list[ServerTool]]:
    """Connect once, answer `initialize` and `tools/list`, and leave: (server name, tools)."""
    from .mcp_session import Session, open_streams

    try:
        async with asyncio.timeout(CONNECT_TIMEOUT):
            async with open_streams(config) as streams, Session(streams[0], streams[1]) as s:
                result = await s.initialize()
                return result.server_info.name, await list_tools(s)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        raise McpUnavailable(_reason(exc)) from None
