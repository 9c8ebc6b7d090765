"""An httpx transport that keeps each raw answer: some facts never reach the client's items."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Answer:
    """One raw HTTP answer as it came off the wire."""

    status: int
    content_type: str
    body: bytearray = field(default_factory=bytearray)

    def chunks(self) -> list[dict[str, Any]]:
        """The JSON objects of an SSE body (or the one object of a JSON body)."""
        text = self.body.decode("utf-8", errors="replace")
        if "event-stream" not in self.content_type:
            return [_loads(text)]
        found = []
        for line in text.splitlines():
            name, _, value = line.partition(":")
            if name == "data" and value.strip() not in ("", "[DONE]"):
                found.append(_loads(value.strip()))
        return [chunk for chunk in found if chunk]


class _TeeStream(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, answer: Answer) -> None:
        self._stream = stream
        self._answer = answer

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            self._answer.body.extend(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class RecordingTransport(httpx.AsyncBaseTransport):
    """An httpx transport that keeps a copy of every answer's raw body."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.answers: list[Answer] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        answer = Answer(response.status_code, response.headers.get("content-type", ""))
        self.answers.append(answer)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_TeeStream(response.stream, answer),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def _loads(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
