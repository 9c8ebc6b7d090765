"""A real local HTTP server speaking the OpenAI Chat Completions protocol (streaming SSE)."""

from __future__ import annotations

import collections
import json
import socket
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from chat.agent.clients import OpenAICompatibleChatClient
from chat.agent.offer import MAX_TOOLS
from chat.testing.openai_script import (
    MODEL,
    RecordedRequest,
    ScriptedResponse,
    error_body,
    validate_request,
)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hanging up (timeouts, cancelled streams) are part of the tests: stay quiet."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr."""

    def do_GET(self) -> None:
        fake = self.server.fake
        fake._record(self, b"")
        if _route(self.path) == "/v1/models":
            data = [{"id": model, "object": "model", "owned_by": "fake"} for model in fake.models]
            self._send_json(200, {"object": "list", "data": data})
        else:
            self._send_json(404, error_body(f"no route for GET {self.path}", "not_found"))

    def do_POST(self) -> None:
        fake = self.server.fake
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = fake._record(self, raw)
        if _route(self.path) != "/v1/chat/completions":
            self._send_json(404, error_body(f"no route for POST {self.path}", "not_found"))
            return
        if request.body is None:
            self._send_json(400, error_body("the request body is not valid JSON"))
            return
        if fake.strict:
            problem = too_many_tools(request.body) or validate_request(
                request.body,
                reject_null_content=fake.reject_null_content,
                reject_empty_content=fake.reject_empty_content,
            )
            for check in fake.checks:
                problem = problem or check(request.body)
            if problem:
                self._send_json(400, error_body(problem))
                return
        response = fake._next(request.body)
        if response is None:
            message = "FakeOpenAIServer: no scripted response left"
            self._send_json(500, error_body(message, "server_error"))
            return
        try:
            self._play(response)
        except OSError:
            self.close_connection = True

    def _play(self, response: ScriptedResponse) -> None:
        stopping = self.server.fake._stopping
        if response.delay and stopping.wait(response.delay):
            return
        if response.json_body is not None or response.status >= 300:
            self._send_json(response.status, response.json_body, response.headers)
            return
        self.send_response(response.status)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in response.headers:
            self.send_header(name, value)
        self.end_headers()
        for sent, item in enumerate(response.chunks):
            if response.cut_after is not None and sent >= response.cut_after:
                self._cut()
                return
            if response.chunk_delay and stopping.wait(response.chunk_delay):
                return
            if response.stall and sent == response.stall[0] and stopping.wait(response.stall[1]):
                return
            text = f"data: {json.dumps(item)}\n\n" if isinstance(item, dict) else item + "\n"
            self._write_chunk(text.encode())
        if response.cut_after is not None:
            self._cut()
            return
        if response.done:
            self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _cut(self) -> None:
        """Hang up without the terminating chunk, like a crashed upstream."""
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _send_json(self, status: int, body: Any, headers: Sequence[tuple[str, str]] = ()) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def too_many_tools(body: Any) -> str | None:
    """OpenAI's refusal of a request carrying more than MAX_TOOLS tools, in its words."""
    tools = body.get("tools") if isinstance(body, dict) else None
    if isinstance(tools, list) and len(tools) > MAX_TOOLS:
        return (
            "Invalid 'tools': array too long. Expected an array with maximum length "
            f"{MAX_TOOLS}, but got an array with length {len(tools)} instead."
        )
    return None


def _route(target: str) -> str:
    return urlsplit(target).path.rstrip("/")


class FakeOpenAIServer:
    """A threaded HTTP server on 127.0.0.1 that plays scripted Chat Completions responses.

    Script it with responses (`text_turn`, `tool_turn`, `error`, `sse`), point a client at
    `base_url`, then inspect `requests`. With `strict` (the default) each request is first
    checked like a strict provider would (`validate_request`, and OpenAI's most tools per
    request, `too_many_tools`); a rejected one gets a 400 and
    consumes no scripted response.
    """

    def __init__(
        self,
        *,
        strict: bool = True,
        reject_null_content: bool = False,
        reject_empty_content: bool = False,
        models: Sequence[str] = (MODEL,),
    ) -> None:
        self.strict = strict
        self.checks: list[Callable[[Any], str | None]] = []
        """Provider quirks to enforce on top of the strict rules: body -> problem or None."""
        self.reject_null_content = reject_null_content
        self.reject_empty_content = reject_empty_content
        self.models = list(models)
        self.requests: list[RecordedRequest] = []
        self.responder: Callable[[Any], ScriptedResponse | None] | None = None
        """Answers each request by its body instead of the queue (requests made at once, in
        any order: a provider deciding by what it is sent)."""
        self._queue: collections.deque[ScriptedResponse] = collections.deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the server is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def pending(self) -> int:
        """How many scripted responses are still queued."""
        return len(self._queue)

    def enqueue(self, *responses: ScriptedResponse) -> FakeOpenAIServer:
        with self._lock:
            self._queue.extend(responses)
        return self

    def start(self) -> FakeOpenAIServer:
        self._stopping.clear()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _next(self, body: Any) -> ScriptedResponse | None:
        if self.responder is not None:
            return self.responder(body)
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def _record(self, handler: BaseHTTPRequestHandler, raw: bytes) -> RecordedRequest:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {name.lower(): value for name, value in handler.headers.items()}
        request = RecordedRequest(
            handler.command, handler.path, headers, body, raw, handler.client_address[:2]
        )
        with self._lock:
            self.requests.append(request)
        return request


def client_for(base_url: str, **options: Any) -> OpenAICompatibleChatClient:
    """A client of a local test server: the fake model, no backoff, timeouts of a second or two."""
    settings: dict[str, Any] = {
        "model": MODEL,
        "backoff": 0,
        "connect_timeout": 1.0,
        "read_timeout": 2.0,
    }
    return OpenAICompatibleChatClient(base_url=base_url, **{**settings, **options})
