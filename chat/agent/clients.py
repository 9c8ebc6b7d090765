"""Model clients: the ChatClient protocol and an OpenAI-compatible streaming HTTP client."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

import httpx

from .contracts import AgentParameters
from .errors import ChatClientError, ProviderConnectionError, ProviderHTTPError, StreamError
from .events import ModelRequestSent, StreamItem
from .http import (
    borrow_client,
    clip,
    completion_as_chunk,
    display_url,
    give_back,
    is_json,
    provider_message,
    retry_wait,
    split_base_url,
)
from .messages import ChatMessage, EmptyContent
from .redaction import longest_first, looks_secret, replace_secrets
from .stream import ChatCompletionStreamParser, sse_lines
from .tools import ToolDefinition
from .wire import WireFormat, build_request_body, encode_body, payload_sha256

logger = logging.getLogger(__name__)

DEFAULT_PARAMETERS = AgentParameters()
DEFAULT_WIRE = WireFormat()
# Failures where the request cannot have been processed (or the server dropped it unanswered).
# Read and write timeouts are not retried: the server may still be generating.
_RETRYABLE_ERRORS = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)


class ChatClient(Protocol):
    """Streams one model turn: ModelRequestSent, deltas and usage, then one TurnEnd."""

    model: str
    label: str

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolDefinition] = (),
        parameters: AgentParameters = DEFAULT_PARAMETERS,
    ) -> AsyncIterator[StreamItem]: ...

    async def aclose(self) -> None: ...


class OpenAICompatibleChatClient:
    """Streams from any server speaking the OpenAI Chat Completions protocol, over httpx."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        model: str,
        extra_headers: Mapping[str, str] | None = None,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_retry_wait: float = 30.0,
        wire: WireFormat = DEFAULT_WIRE,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.model = model
        self.label = model
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_retries = max(0, max_retries)
        self.backoff = backoff
        self.max_retry_wait = max_retry_wait
        self.wire = wire
        self._url, self._params, url_secrets = split_base_url(base_url)
        self.base_url = display_url(self._url)
        self._headers = {"Accept": "text/event-stream, application/json"}
        self._secrets = set(url_secrets)
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
            self._secrets.add(api_key)
        for name, value in (extra_headers or {}).items():
            self._headers[name] = value
            if looks_secret(name):
                self._secrets.add(value.removeprefix("Bearer ").strip())
        self._secrets.discard("")
        self._ordered_secrets = longest_first(self._secrets)
        self._timeout = httpx.Timeout(
            connect=connect_timeout, read=read_timeout, write=read_timeout, pool=connect_timeout
        )
        self._owns_client = http_client is None
        self._client = http_client if http_client is not None else borrow_client()

    @property
    def empty_content(self) -> EmptyContent:
        return self.wire.empty_content

    @empty_content.setter
    def empty_content(self, value: EmptyContent) -> None:
        self.wire = dataclasses.replace(self.wire, empty_content=value)

    def __repr__(self) -> str:
        return f"OpenAICompatibleChatClient(base_url={self.base_url!r}, model={self.model!r})"

    async def __aenter__(self) -> OpenAICompatibleChatClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_client:
            self._owns_client = False
            await give_back(self._client)

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolDefinition] = (),
        parameters: AgentParameters = DEFAULT_PARAMETERS,
    ) -> AsyncIterator[StreamItem]:
        body = build_request_body(
            messages,
            model=self.model,
            tools=tools,
            parameters=parameters,
            wire=self.wire,
        )
        payload = encode_body(body)
        digest = payload_sha256(payload)
        started = time.monotonic()
        response, attempts = await self._send("POST", "/chat/completions", payload, body, digest)
        parser = ChatCompletionStreamParser()
        received = False
        raw: list[tuple[float, str]] = []

        def failure(message: str) -> StreamError:
            return StreamError(
                self._redact(message),
                partial=parser.partial(),
                status_code=response.status_code,
                request_body=body,
                request_sha256=digest,
                attempts=attempts,
            )

        try:
            yield ModelRequestSent(
                body=body,
                status_code=response.status_code,
                attempts=attempts,
                url=f"{self.base_url}/chat/completions",
                sha256=digest,
            )
            try:
                if is_json(response):
                    await response.aread()
                    received = True
                    ms = round((time.monotonic() - started) * 1000, 1)
                    raw.append((ms, self._redact(response.text)))
                    for item in parser.feed_chunk(completion_as_chunk(response.text)):
                        yield item
                else:
                    async for line in sse_lines(_body_chunks(response)):
                        received = True
                        if line:
                            ms = round((time.monotonic() - started) * 1000, 1)
                            raw.append((ms, self._redact(line)))
                        for item in parser.feed_line(line):
                            yield item
                turn = parser.finish()
            except StreamError as exc:
                raise failure(exc.message) from None
            except httpx.TimeoutException:
                if not received:
                    raise ProviderConnectionError(
                        f"no response within {self.read_timeout:g}s (read timeout)",
                        status_code=response.status_code,
                        request_body=body,
                        request_sha256=digest,
                        attempts=attempts,
                    ) from None
                raise failure(
                    f"the stream stalled: no data within {self.read_timeout:g}s "
                    f"(read timeout) after {_streamed_chars(parser)} characters"
                ) from None
            except httpx.RequestError as exc:
                if not received:
                    raise ProviderConnectionError(
                        self._redact(f"the connection dropped before any data arrived: {exc}"),
                        status_code=response.status_code,
                        request_body=body,
                        request_sha256=digest,
                        attempts=attempts,
                    ) from None
                raise failure(
                    f"the connection dropped mid-stream after {_streamed_chars(parser)} characters"
                ) from None
        except ChatClientError as exc:
            exc.raw = tuple(raw)
            raise
        finally:
            await response.aclose()
        yield dataclasses.replace(turn, raw=tuple(raw))

    async def list_models(self) -> list[str]:
        """The model ids the server offers (GET /models)."""
        response, attempts = await self._send("GET", "/models", None, None, "")
        try:
            data = json.loads(response.content)
            return [str(model["id"]) for model in data["data"]]
        except (ValueError, KeyError, TypeError):
            raise ProviderHTTPError(
                self._redact(f"unexpected /models answer: {clip(response.text)}"),
                status_code=response.status_code,
                attempts=attempts,
            ) from None

    async def _send(
        self,
        method: str,
        path: str,
        payload: bytes | None,
        body: dict[str, Any] | None,
        digest: str,
    ) -> tuple[httpx.Response, int]:
        """Send with retries until a 2xx response's headers arrive; the caller reads the body.

        GET responses come back fully read; POST responses come back open for streaming.
        `digest` is the payload's sha256, carried with `body` by the errors raised here.
        """
        url = self._url + path
        headers = dict(self._headers)
        if payload is not None:
            headers["Content-Type"] = "application/json"
        attempts = 0
        while True:
            attempts += 1
            retries_left = attempts <= self.max_retries
            try:
                request = self._client.build_request(
                    method,
                    url,
                    params=self._params,
                    content=payload,
                    headers=headers,
                    timeout=self._timeout,
                )
            except httpx.InvalidURL as exc:
                raise ProviderConnectionError(
                    self._redact(f"invalid base URL {self.base_url}: {exc}"),
                    request_body=body,
                    request_sha256=digest,
                    attempts=attempts,
                ) from None
            try:
                response = await self._client.send(request, stream=method == "POST")
            except httpx.TransportError as exc:
                message = self._describe(exc)
                if retries_left and isinstance(exc, _RETRYABLE_ERRORS):
                    await self._wait(message, {}, attempts)
                    continue
                raise ProviderConnectionError(
                    message, request_body=body, request_sha256=digest, attempts=attempts
                ) from None
            if response.is_success:
                return response, attempts
            try:
                await response.aread()
                text = response.text
            except httpx.HTTPError:
                text = ""
            finally:
                await response.aclose()
            status = response.status_code
            message = provider_message(text, response.reason_phrase)
            if response.is_redirect:
                location = response.headers.get("location", "?")
                message += f" (redirected to {location}: check the base URL)"
            message = self._redact(message)
            if retries_left and (status == 429 or status >= 500):
                await self._wait(f"HTTP {status}: {message}", response.headers, attempts)
                continue
            raise ProviderHTTPError(
                message,
                status_code=status,
                request_body=body,
                request_sha256=digest,
                attempts=attempts,
            )

    async def _wait(self, reason: str, headers: Mapping[str, str], attempts: int) -> None:
        wait = retry_wait(
            headers, retry=attempts - 1, backoff=self.backoff, max_wait=self.max_retry_wait
        )
        logger.warning(
            "%s failed (%s); retry %d of %d in %.2fs",
            self.base_url,
            reason,
            attempts,
            self.max_retries,
            wait,
            extra={"retry": (attempts, self.max_retries, wait)},
        )
        await asyncio.sleep(wait)

    def _describe(self, exc: httpx.TransportError) -> str:
        detail = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.ConnectTimeout):
            text = (
                f"could not connect to {self.base_url} within "
                f"{self.connect_timeout:g}s (connect timeout)"
            )
        elif isinstance(exc, httpx.ConnectError):
            text = f"could not connect to {self.base_url}: {detail}"
        elif isinstance(exc, httpx.ReadTimeout):
            text = f"no response within {self.read_timeout:g}s (read timeout)"
        elif isinstance(exc, httpx.TimeoutException):
            text = f"request to {self.base_url} timed out ({type(exc).__name__})"
        elif isinstance(exc, httpx.RemoteProtocolError):
            text = f"{self.base_url} closed the connection without a response: {detail}"
        else:
            text = f"request to {self.base_url} failed: {type(exc).__name__}: {detail}"
        return self._redact(text)

    def _redact(self, text: str) -> str:
        return replace_secrets(text, self._ordered_secrets)


def _body_chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body as it arrives; straight from the transport when the provider did not compress
    it (one generator layer less per chunk), unless a transport already read it (mocks do)."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding == "identity" and not response.is_stream_consumed:
        return response.aiter_raw()
    return response.aiter_bytes()


def _streamed_chars(parser: ChatCompletionStreamParser) -> int:
    return len(parser.text) + len(parser.reasoning)
