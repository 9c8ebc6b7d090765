"""What the OpenAI-compatible client reads off HTTP: retry waits, the provider's own error
message, answers that ignored `stream`, and base URLs that carry credentials."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import math
import select
import ssl
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from http.cookiejar import DefaultCookiePolicy
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import httpcore
import httpx

from .errors import StreamError
from .redaction import looks_secret

MAX_ERROR_CHARS = 2000


def retry_wait(headers: Mapping[str, str], *, retry: int, backoff: float, max_wait: float) -> float:
    """Seconds to wait before retry number `retry` (0-based): Retry-After if given, else backoff."""
    wait: float = backoff * 2.0**retry
    value = str(httpx.Headers(headers).get("retry-after") or "").strip()
    if value:
        try:
            wait = float(value)
        except ValueError:
            try:
                date = parsedate_to_datetime(value)
            except (TypeError, ValueError):
                pass
            else:
                if date.tzinfo is None:
                    date = date.replace(tzinfo=UTC)
                wait = (date - datetime.now(UTC)).total_seconds()
    if not math.isfinite(wait):
        wait = max_wait
    return min(max(wait, 0.0), max_wait)


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """One TLS context for every client: loading the CA bundle costs ~20 ms of CPU each time."""
    return httpx.create_ssl_context()


KEPT_CLIENTS = 256
"""Idle HTTP clients an event loop keeps for its next streams (each with its kept-alive
connection to a provider)."""
_IDLE: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[httpx.AsyncClient]] = (
    weakref.WeakKeyDictionary()
)


READ_PACING: contextvars.ContextVar[Callable[[], float] | None] = contextvars.ContextVar(
    "read_pacing", default=None
)
"""Set by whoever shows a stream (the run's publisher): a function giving the time.monotonic()
before which the stream's next read need not happen, because what it read would only wait
for the next frame anyway (0: read at once)."""
TRICKLE_BYTES = 2048
"""A read shorter than this came from a model slower than the reader: the next one is paced."""


class PacedStream(httpcore.AsyncNetworkStream):
    """A provider connection whose reads of a trickling stream wait for the next frame.

    A model sending a token every 20 ms woke the process for every token, and every wake-up
    costs far more CPU than the token (on 2 cores, ~0.2 ms against ~0.02). While nothing waits
    in the socket, a read is put off until READ_PACING's time, then takes every token that
    came meanwhile in one go: one wake-up per frame. The first read after a request, a read
    after a large one (a fast model), and anything outside a paced run go at once.
    """

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._trickles = False
        self._socket = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        pacing = READ_PACING.get()
        if pacing is not None and self._trickles:
            delay = pacing() - time.monotonic()
            if delay > 0 and not self._readable():
                await asyncio.sleep(delay)
        data = await self._inner.read(max_bytes, timeout)
        self._trickles = len(data) < TRICKLE_BYTES
        return data

    def _readable(self) -> bool:
        """Whether data (or the end) waits in the socket (asking anyio costs a dict per call)."""
        try:
            poller = select.poll()
            poller.register(self._socket, select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, TypeError, ValueError):
            return True  # no socket to ask: read, and let the read tell

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        self._trickles = False
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        return PacedStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class PacedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, with PacedStream connections."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return PacedStream(
            await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return PacedStream(await self._inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class PacedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport on a PacedBackend (httpx takes no network backend of its own)."""

    def __init__(self, *, verify: ssl.SSLContext) -> None:
        super().__init__(verify=verify)
        limits = httpx.Limits()
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=verify,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=PacedBackend(),
        )


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def borrow_client() -> httpx.AsyncClient:
    """An HTTP client for one model client's streams: one this event loop kept, else a new one.

    A kept client's connection to the provider is still open, so a run skips the TCP and TLS
    handshakes. Each stream gets a client of its own rather than one pool for all: httpcore
    scans every connection of a pool on each request, and 200 streams on one pool cost more
    than a client each. A client keeps no cookies: it serves other users' runs later.
    """
    loop = _running_loop()
    idle = _IDLE.get(loop) if loop is not None else None
    while idle:
        client = idle.pop()
        if not client.is_closed:
            return client
    client = httpx.AsyncClient(transport=PacedTransport(verify=ssl_context()))
    client.cookies.jar.set_policy(DefaultCookiePolicy(allowed_domains=[]))
    return client


async def give_back(client: httpx.AsyncClient) -> None:
    """Keep a borrowed client for the next stream of this event loop, or close it when
    KEPT_CLIENTS are kept already."""
    loop = _running_loop()
    if loop is not None and not client.is_closed:
        idle = _IDLE.setdefault(loop, [])
        if len(idle) < KEPT_CLIENTS:
            idle.append(client)
            return
    await client.aclose()


def split_base_url(base_url: str) -> tuple[str, httpx.QueryParams, set[str]]:
    """The URL to send to (query moved to params), its query params, and the secrets in them."""
    parts = urlsplit(base_url.strip())
    secrets: set[str] = set()
    userinfo, _, _ = parts.netloc.rpartition("@")
    if userinfo:
        _, _, password = userinfo.partition(":")
        secrets.update({userinfo, unquote(userinfo), password, unquote(password)})
    params = parse_qsl(parts.query, keep_blank_values=True)
    secrets.update(value for name, value in params if looks_secret(name))
    secrets.discard("")
    url = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    return url, httpx.QueryParams(parts.query), secrets


def display_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def provider_message(text: str, reason: str) -> str:
    """The provider's own error message out of the shapes servers use, else the raw text."""
    text = text.strip()
    try:
        data: Any = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, list) and data:
        data = data[0]
    message: Any = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            message = error.get("message") or error
        elif error:
            message = error
        message = message or data.get("message") or data.get("detail")
    if message and not isinstance(message, str):
        message = json.dumps(message, ensure_ascii=False)
    return clip(message or text or reason or "no error message")


def is_json(response: httpx.Response) -> bool:
    content_type: str = response.headers.get("content-type", "")
    return content_type.startswith("application/json")


def completion_as_chunk(text: str) -> Any:
    """A JSON answer (a server that ignored `stream`, or an error) in the shape of one chunk."""
    try:
        data = json.loads(text)
    except ValueError:
        raise StreamError(f"malformed response body: {clip(text, 200)}") from None
    if isinstance(data, dict) and isinstance(data.get("choices"), list):
        choices = [
            {**choice, "delta": choice.get("message")}
            if isinstance(choice, dict) and "delta" not in choice
            else choice
            for choice in data["choices"]
        ]
        return {**data, "choices": choices}
    return data


def clip(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"
