"""What the OpenAI-compatible client reads off HTTP: retry waits, the provider's own error
message, answers that ignored `stream`, and base URLs that carry credentials."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import ssl
import weakref
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from http.cookiejar import DefaultCookiePolicy
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

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


KEPT_CLIENTS = 64
"""Idle HTTP clients an event loop keeps for its next streams (each with its kept-alive
connection to a provider)."""
_IDLE: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[httpx.AsyncClient]] = (
    weakref.WeakKeyDictionary()
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
    client = httpx.AsyncClient(verify=ssl_context())
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
