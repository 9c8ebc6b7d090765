"""A local OpenAI-compatible streaming server for the benchmark, on asyncio streams only.

`POST /v1/chat/completions` answers with SSE: optional rounds of tool calls to the built-in
`get_current_time`, then a reply of numbered words ("t0 t1 t2 ..."), so a client can tell lost,
duplicated and reordered tokens apart, then a finish chunk, a usage chunk and `[DONE]`.

Each request is shaped by its last user message, so one server serves every scenario (and the
browser, which can only type text): `bench tag=ab12 tokens=500 pace_ms=20 tools=1`. Missing
fields take the server's defaults. `GET /stats` returns, per request, when the server wrote the
first and the last token chunk (time.monotonic(), which is CLOCK_MONOTONIC and so comparable
across processes on one Linux host); `POST /reset` forgets them.

Run it alone with `python -m bench.provider --port 8765`; the benchmark starts it as a child
process so its work does not share an event loop with the clients that time it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from chat.testing.processes import ROOT, ManagedProcess

MODEL = "bench-model"
TOOL_NAME = "get_current_time"
_FIELDS = re.compile(r"\b(tag|tokens|pace_ms|tools)=([\w.]+)")
_CHUNK_HEAD = b'{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
_CHUNK_HEAD += b'"model":"' + MODEL.encode() + b'","choices":['


@dataclass(frozen=True)
class ReplySpec:
    """What one request asks for: reply length, pace between tokens, tool-call rounds."""

    tag: str = ""
    tokens: int = 500
    pace_ms: float = 0.0
    tools: int = 0

    def prompt(self) -> str:
        """The user message that asks the bench provider for this reply."""
        return (
            f"bench tag={self.tag} tokens={self.tokens} pace_ms={self.pace_ms:g} tools={self.tools}"
        )


PARAGRAPH = 40
"""Tokens a paragraph of the reply holds: a reply has blocks, as replies do, so the page renders
each finished one while the rest streams (chat.live_markdown)."""


def expected_text(tokens: int) -> str:
    """The reply the provider streams for a given length."""
    return "".join(token_piece(index) for index in range(tokens))


def token_piece(index: int) -> str:
    if index == 0:
        return "t0"
    return f"\n\nt{index}" if index % PARAGRAPH == 0 else f" t{index}"


def parse_prompt(text: str, default: ReplySpec) -> ReplySpec:
    fields = dict(_FIELDS.findall(text))
    return ReplySpec(
        tag=fields.get("tag", default.tag),
        tokens=int(fields.get("tokens", default.tokens)),
        pace_ms=float(fields.get("pace_ms", default.pace_ms)),
        tools=int(fields.get("tools", default.tools)),
    )


@dataclass
class RequestRecord:
    """Server-side timing of one chat completion request."""

    tag: str
    round: int
    kind: str
    tokens: int
    received_at: float
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None


def _sse(payload: bytes) -> bytes:
    event = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


def _choice_chunk(delta: bytes, finish_reason: str | None = None) -> bytes:
    finish = b"null" if finish_reason is None else b'"' + finish_reason.encode() + b'"'
    body = b'{"index":0,"delta":' + delta + b',"logprobs":null,"finish_reason":' + finish + b"}]}"
    return _sse(_CHUNK_HEAD + body)


def _usage_chunk(prompt: int, completion: int) -> bytes:
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return _sse(_CHUNK_HEAD + b'],"usage":' + json.dumps(usage).encode() + b"}")


_TEXT_ROLE = _choice_chunk(b'{"role":"assistant","content":""}')
_TOOL_ROLE = _choice_chunk(b'{"role":"assistant","content":null}')
_STOP = _choice_chunk(b"{}", "stop")
_TOOL_STOP = _choice_chunk(b"{}", "tool_calls")
_DONE = _sse(b"[DONE]") + b"0\r\n\r\n"
_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def _token_chunk(index: int) -> bytes:
    return _choice_chunk(b'{"content":' + json.dumps(token_piece(index)).encode() + b"}")


class BenchProvider:
    """The asyncio server; `records` holds the timing of every completion request."""

    def __init__(self, *, default: ReplySpec | None = None) -> None:
        self.default = default or ReplySpec()
        self.records: list[RequestRecord] = []
        self._tokens: list[bytes] = []
        self.server: asyncio.Server | None = None

    def token(self, index: int) -> bytes:
        while len(self._tokens) <= index:
            self._tokens.append(_token_chunk(len(self._tokens)))
        return self._tokens[index]

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self.server = await asyncio.start_server(self._connection, host, port, backlog=1024)
        return int(self.server.sockets[0].getsockname()[1])

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                received = time.monotonic()
                request_line, *lines = head.decode("latin-1").split("\r\n")
                method, target, _ = request_line.split(" ", 2)
                headers = {}
                for line in lines:
                    name, _, value = line.partition(":")
                    if name:
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length") or 0)
                body = await reader.readexactly(length) if length else b""
                path = target.split("?", 1)[0]
                if method == "POST" and path.endswith("/chat/completions"):
                    await self._completion(json.loads(body), writer, received)
                elif method == "GET" and path == "/stats":
                    self._json(writer, [asdict(record) for record in self.records])
                elif method == "POST" and path == "/reset":
                    self.records.clear()
                    self._json(writer, {"ok": True})
                elif method == "GET" and path.endswith("/models"):
                    self._json(writer, {"object": "list", "data": [{"id": MODEL}]})
                else:
                    self._json(writer, {"error": {"message": f"no route {path}"}}, status=404)
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    def _json(self, writer: asyncio.StreamWriter, data: Any, status: int = 200) -> None:
        payload = json.dumps(data).encode()
        writer.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            % (status, b"OK" if status == 200 else b"Not Found", len(payload))
            + payload
        )

    async def _completion(
        self, body: dict[str, Any], writer: asyncio.StreamWriter, received: float
    ) -> None:
        messages = body.get("messages") or []
        last_user = max(
            (i for i, message in enumerate(messages) if message.get("role") == "user"), default=-1
        )
        content = messages[last_user].get("content") if last_user >= 0 else ""
        spec = parse_prompt(content if isinstance(content, str) else "", self.default)
        done_rounds = sum(
            1
            for message in messages[last_user + 1 :]
            if message.get("role") == "assistant" and message.get("tool_calls")
        )
        prompt_tokens = 10 * len(messages)
        writer.write(_STREAM_HEAD)
        if done_rounds < spec.tools:
            record = RequestRecord(spec.tag, done_rounds, "tool", 0, received)
            self.records.append(record)
            call_id = f"call_{spec.tag or 'bench'}_{done_rounds}"
            first = {"index": 0, "id": call_id, "type": "function"}
            fragments = [
                {**first, "function": {"name": TOOL_NAME, "arguments": ""}},
                {"index": 0, "function": {"arguments": '{"timezone": '}},
                {"index": 0, "function": {"arguments": '"UTC"}'}},
            ]
            writer.write(_TOOL_ROLE)
            for fragment in fragments:
                delta = json.dumps({"tool_calls": [fragment]}).encode()
                writer.write(_choice_chunk(delta))
            writer.write(_TOOL_STOP + _usage_chunk(prompt_tokens, 12) + _DONE)
            record.finished_at = time.monotonic()
            return
        record = RequestRecord(spec.tag, done_rounds, "text", spec.tokens, received)
        self.records.append(record)
        writer.write(_TEXT_ROLE)
        pace = spec.pace_ms / 1000
        loop = asyncio.get_running_loop()
        start = loop.time()
        for index in range(spec.tokens):
            if pace > 0 and index:
                delay = start + index * pace - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                await writer.drain()
            elif index and index % 64 == 0:
                await writer.drain()
                await asyncio.sleep(0)  # let the other streams interleave
            writer.write(self.token(index))
            if index == 0:
                record.first_token_at = time.monotonic()
        record.last_token_at = time.monotonic()
        writer.write(_STOP + _usage_chunk(prompt_tokens, spec.tokens) + _DONE)
        record.finished_at = time.monotonic()


async def _serve(host: str, port: int, default: ReplySpec) -> None:
    provider = BenchProvider(default=default)
    bound = await provider.start(host, port)
    print(f"listening on http://{host}:{bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--pace-ms", type=float, default=0.0)
    parser.add_argument("--tool-rounds", type=int, default=0)
    args = parser.parse_args(argv)
    default = ReplySpec(tokens=args.tokens, pace_ms=args.pace_ms, tools=args.tool_rounds)
    asyncio.run(_serve(args.host, args.port, default))


class ProviderProcess(ManagedProcess):
    """`python -m bench.provider` as a child process on a free port."""

    name = "bench provider"

    def __init__(self, *, default: ReplySpec | None = None) -> None:
        super().__init__()
        self.default = default or ReplySpec()
        self.url = ""
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def launch(self) -> subprocess.Popen[Any]:
        return subprocess.Popen(
            [
                sys.executable, "-m", "bench.provider",
                "--tokens", str(self.default.tokens),
                "--pace-ms", str(self.default.pace_ms),
                "--tool-rounds", str(self.default.tools),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )  # fmt: skip

    def wait_ready(self, process: subprocess.Popen[Any]) -> None:
        """The provider prints the address it listens on once it does."""
        line = process.stdout.readline().strip() if process.stdout else ""
        if not line.startswith("listening on "):
            raise RuntimeError(f"the bench provider did not start: {line!r}")
        self.url = line.removeprefix("listening on ")
        self.port = int(self.url.rsplit(":", 1)[1])


if __name__ == "__main__":
    main()
