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


_SHARED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)


def shared_client() -> httpx.AsyncClient | None:
    """The running event loop's HTTP client for providers: one connection pool per process
    (None outside an event loop: the caller's client then makes its own).

    A run then reuses a kept-alive connection to its provider (no TCP and TLS handshake per run)
    instead of building a client and opening a connection of its own. No limit on connections:
    a stream holds one for its whole length, and 200 of them must not queue. It keeps no
    cookies, so nothing one provider response set is sent along with another user's request.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    client = _SHARED.get(loop)
    if client is None or client.is_closed:
        client = _SHARED[loop] = httpx.AsyncClient(
            verify=ssl_context(),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
        )
        client.cookies.jar.set_policy(DefaultCookiePolicy(allowed_domains=[]))
    return client


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
