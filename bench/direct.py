"""The direct client: reads the provider's stream itself, over a raw asyncio socket.

It is the baseline the relayed (WebSocket) figures are compared with: the same request, the same
reply length and pace, the same tool-call rounds (it answers get_current_time itself), a new
connection per reply as the app opens one per run. A raw socket keeps the client's own cost
small, so the baseline is the provider's stream as delivered, not a client library's overhead.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from bench.provider import MODEL, TOOL_NAME, ReplySpec
from bench.stats import Timed


@dataclass
class DirectReply(Timed):
    """Client-side timing of one reply read straight from the provider."""

    tag: str
    sent_at: float
    first_token: float | None = None
    completed: float | None = None
    text: str = ""
    chunks: int = 0
    bytes: int = 0
    rounds: int = 0
    error: str = ""
    gaps: list[float] = field(default_factory=list)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": "Get the current date and time, optionally in an IANA time zone.",
            "parameters": {
                "type": "object",
                "properties": {"timezone": {"type": "string"}},
                "additionalProperties": False,
            },
        },
    }
]


def request_bytes(host: str, port: int, body: dict[str, Any]) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}:{port}\r\n"
        f"accept: text/event-stream\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer bench-key\r\ncontent-length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


async def _read_events(reader: asyncio.StreamReader) -> Any:
    """Yield SSE data payloads (str) of one chunked HTTP response."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b" ", 2)[1]
    if status != b"200":
        raise RuntimeError(f"HTTP {status.decode()}")
    buffer = b""
    while True:
        size = int((await reader.readline()).strip() or b"0", 16)
        if size == 0:
            await reader.readline()
            return
        buffer += (await reader.readexactly(size + 2))[:-2]
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data: "):
                    yield line[6:].decode(), len(event) + 2


async def stream_reply(host: str, port: int, spec: ReplySpec) -> DirectReply:
    """One complete reply, tool rounds included, timed from before the connection opens."""
    reply = DirectReply(tag=spec.tag, sent_at=time.monotonic())
    messages: list[dict[str, Any]] = [{"role": "user", "content": spec.prompt()}]
    text: list[str] = []
    writer: asyncio.StreamWriter | None = None
    try:
        reader, writer = await asyncio.open_connection(host, port)
        for _ in range(spec.tools + 1):
            body: dict[str, Any] = {
                "model": MODEL,
                "messages": messages,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            if spec.tools:
                body |= {"tools": TOOLS, "tool_choice": "auto"}
            writer.write(request_bytes(host, port, body))
            calls: dict[int, dict[str, Any]] = {}
            last = None
            async for data, size in _read_events(reader):
                reply.bytes += size
                if data == "[DONE]":
                    continue
                chunk = json.loads(data)
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if content := delta.get("content"):
                        now = time.monotonic()
                        if reply.first_token is None:
                            reply.first_token = now
                        elif last is not None:
                            reply.gaps.append(now - last)
                        last = now
                        reply.chunks += 1
                        text.append(content)
                    for fragment in delta.get("tool_calls") or []:
                        call = calls.setdefault(
                            fragment["index"], {"id": "", "name": "", "arguments": ""}
                        )
                        call["id"] = fragment.get("id") or call["id"]
                        function = fragment.get("function") or {}
                        call["name"] += function.get("name") or ""
                        call["arguments"] += function.get("arguments") or ""
            reply.rounds += 1
            if not calls:
                break
            tool_calls = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for call in calls.values()
            ]
            messages.append({"role": "assistant", "content": "", "tool_calls": tool_calls})
            for call in calls.values():
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
                result = json.dumps({"timezone": "UTC", "iso": stamp})
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        reply.completed = time.monotonic()
    except (OSError, RuntimeError, asyncio.IncompleteReadError, ValueError) as exc:
        reply.error = f"{type(exc).__name__}: {exc}"
    finally:
        if writer is not None:
            writer.close()
    reply.text = "".join(text)
    return reply


async def direct_round(host: str, port: int, specs: list[ReplySpec]) -> list[DirectReply]:
    """All replies at once, as many simultaneous streams as specs."""
    return list(await asyncio.gather(*(stream_reply(host, port, spec) for spec in specs)))
