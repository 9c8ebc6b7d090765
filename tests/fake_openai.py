"""A real local HTTP server speaking the OpenAI Chat Completions protocol, for tests.

Script it with responses (`text_turn`, `tool_turn`, `error`, `sse`), point a client at
`server.base_url`, then inspect `server.requests`. Registered as a pytest plugin, it provides the
`fake_openai` fixture.

Raw control on a response, e.g. `text_turn("hi").but(cut_after=2)`: `delay` waits before the
headers, `chunk_delay` before every chunk, `stall=(n, seconds)` pauses once after n chunks,
`cut_after=n` hangs up after n chunks (no [DONE], no end of body), `done=False` leaves out
`data: [DONE]`; `sse()` takes raw lines as strings, to send malformed data.

With `strict` (the default) each request is first checked like a strict provider would
(`validate_request`); a rejected one gets a 400 and consumes no scripted response.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

MODEL = "fake-model"
ROLES = ("system", "user", "assistant", "tool")

Chunk = dict[str, Any] | str
"""A dict is sent as one `data: <json>` event; a str is sent verbatim as one raw line."""


@dataclass(frozen=True)
class RecordedRequest:
    """One request received: target path with query, lower-cased headers, parsed JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes


@dataclass(frozen=True)
class ScriptedResponse:
    """One scripted answer: a JSON body (errors), or SSE chunks with optional raw control."""

    status: int = 200
    chunks: tuple[Chunk, ...] = ()
    json_body: Any = None
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0
    chunk_delay: float = 0.0
    cut_after: int | None = None
    stall: tuple[int, float] | None = None
    done: bool = True

    def but(self, **changes: Any) -> ScriptedResponse:
        """A copy with some fields changed, e.g. `text_turn("hi").but(cut_after=2)`."""
        return dataclasses.replace(self, **changes)


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
    choices: bool = True,
) -> dict[str, Any]:
    """One `chat.completion.chunk` as OpenAI sends it."""
    data: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [],
    }
    if choices:
        data["choices"] = [
            {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}
        ]
    if usage is not None:
        data["usage"] = usage
    return data


def usage_chunk(prompt: int, completion: int) -> dict[str, Any]:
    """The final usage chunk of a stream with `stream_options.include_usage` (`choices: []`)."""
    counts = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return chunk(choices=False, usage=counts)


def sse(*chunks: Chunk, status: int = 200, done: bool = True, **options: Any) -> ScriptedResponse:
    """A stream of exactly these chunks (dicts as JSON events, strs as raw lines)."""
    return ScriptedResponse(status=status, chunks=chunks, done=done, **options)


def _pieces(text: str, size: int) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), max(1, size))]


def text_turn(
    text: str,
    *,
    chunk_size: int = 4,
    reasoning: str | None = None,
    usage: tuple[int, int] | None = None,
    finish_reason: str = "stop",
    reasoning_field: str = "reasoning_content",
) -> ScriptedResponse:
    """A streamed text answer: a role chunk, reasoning then text in pieces, finish, usage."""
    chunks: list[Chunk] = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({reasoning_field: piece}) for piece in _pieces(reasoning or "", chunk_size)]
    chunks += [chunk({"content": piece}) for piece in _pieces(text, chunk_size)]
    chunks.append(chunk({}, finish_reason=finish_reason))
    if usage is not None:
        chunks.append(usage_chunk(*usage))
    return sse(*chunks)


def tool_turn(
    calls: Sequence[tuple[str, str, str]],
    *,
    text: str = "",
    fragment_size: int = 5,
    finish_reason: str = "tool_calls",
    usage: tuple[int, int] | None = None,
    interleave: bool = False,
) -> ScriptedResponse:
    """Tool calls `(id, name, arguments_json)` streamed as fragments keyed by index.

    Each call's first fragment carries id and name, the next ones only argument pieces. With
    `interleave`, the fragments of parallel calls alternate.
    """
    chunks: list[Chunk] = [chunk({"role": "assistant", "content": None})]
    chunks += [chunk({"content": piece}) for piece in _pieces(text, 4)]
    per_call: list[list[dict[str, Any]]] = []
    for index, (call_id, name, arguments) in enumerate(calls):
        first = {"index": index, "id": call_id, "type": "function"}
        fragments = [{**first, "function": {"name": name, "arguments": ""}}]
        fragments += [
            {"index": index, "function": {"arguments": piece}}
            for piece in _pieces(arguments, fragment_size)
        ]
        per_call.append(fragments)
    if interleave:
        ordered = [
            fragments[step]
            for step in range(max((len(f) for f in per_call), default=0))
            for fragments in per_call
            if step < len(fragments)
        ]
    else:
        ordered = [fragment for fragments in per_call for fragment in fragments]
    chunks += [chunk({"tool_calls": [fragment]}) for fragment in ordered]
    chunks.append(chunk({}, finish_reason=finish_reason))
    if usage is not None:
        chunks.append(usage_chunk(*usage))
    return sse(*chunks)


def error(
    status: int,
    message: str,
    *,
    headers: dict[str, str] | None = None,
    type: str = "invalid_request_error",
) -> ScriptedResponse:
    """A non-2xx JSON error in the OpenAI shape."""
    body = {"error": {"message": message, "type": type, "param": None, "code": None}}
    return ScriptedResponse(status=status, json_body=body, headers=tuple((headers or {}).items()))


def validate_request(
    body: Any, *, reject_null_content: bool = False, reject_empty_content: bool = False
) -> str | None:
    """What a strict provider would reject in this request body, or None if it is valid."""
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    if "tools" in body:
        tools = body["tools"]
        if not isinstance(tools, list) or not tools:
            return "[] is too short - 'tools'"
        for index, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("function"), dict):
                return f"tools[{index}] must be a function tool"
            function = tool["function"]
            if tool.get("type") != "function":
                return f"tools[{index}] must be a function tool"
            if not function.get("name"):
                return f"tools[{index}].function.name is required"
    else:
        for option in ("tool_choice", "parallel_tool_calls"):
            if option in body:
                return f"'{option}' is only allowed when 'tools' are specified"
    if "stream_options" in body and body.get("stream") is not True:
        return "the 'stream_options' parameter is only allowed when 'stream' is enabled"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    pending: list[str] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            return f"{where} must be an object"
        role = message.get("role")
        if role not in ROLES:
            return f"{where}.role: {role!r} is not one of {list(ROLES)}"
        if role != "tool" and pending:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(pending)}"
            )
        if "tool_calls" in message:
            problem = _check_tool_calls(where, message, reject_null_content, reject_empty_content)
            if problem:
                return problem
            pending = [call["id"] for call in message["tool_calls"]]
            continue
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                return f"{where}: a tool message needs a 'tool_call_id'"
            if call_id not in pending:
                return (
                    f"{where}: messages with role 'tool' must be a response to a preceding "
                    f"message with 'tool_calls' (no pending call {call_id!r})"
                )
            pending.remove(call_id)
        if not isinstance(message.get("content"), str | list):
            return f"{where}.content must be a string"
    if pending:
        return f"tool_call_ids did not have response messages: {', '.join(pending)}"
    return None


def _check_tool_calls(
    where: str, message: dict[str, Any], reject_null: bool, reject_empty: bool
) -> str | None:
    calls = message["tool_calls"]
    if message.get("role") != "assistant":
        return f"{where}: only assistant messages may carry 'tool_calls'"
    if not isinstance(calls, list) or not calls:
        return f"{where}.tool_calls: [] is too short - an empty list is invalid"
    ids: list[str] = []
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or call.get("type") != "function":
            return f"{where}.tool_calls[{index}] must be a function call"
        if not isinstance(call.get("id"), str) or not call["id"]:
            return f"{where}.tool_calls[{index}].id is required"
        if not function.get("name") or not isinstance(function.get("arguments"), str):
            return f"{where}.tool_calls[{index}].function needs a name and string arguments"
        if call["id"] in ids:
            return f"{where}.tool_calls: duplicate id {call['id']!r}"
        ids.append(call["id"])
    content = message.get("content", "")
    if reject_null and "content" in message and content is None:
        return f"{where}.content: null is not allowed"
    if reject_empty and content == "":
        return f"{where}.content: an empty string is not allowed"
    if content is not None and not isinstance(content, str | list):
        return f"{where}.content must be a string or null"
    return None


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
            self._send_json(404, _error_body(f"no route for GET {self.path}", "not_found"))

    def do_POST(self) -> None:
        fake = self.server.fake
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = fake._record(self, raw)
        if _route(self.path) != "/v1/chat/completions":
            self._send_json(404, _error_body(f"no route for POST {self.path}", "not_found"))
            return
        if request.body is None:
            self._send_json(400, _error_body("the request body is not valid JSON"))
            return
        if fake.strict:
            problem = validate_request(
                request.body,
                reject_null_content=fake.reject_null_content,
                reject_empty_content=fake.reject_empty_content,
            )
            for check in fake.checks:
                problem = problem or check(request.body)
            if problem:
                self._send_json(400, _error_body(problem))
                return
        response = fake._next()
        if response is None:
            message = "FakeOpenAIServer: no scripted response left"
            self._send_json(500, _error_body(message, "server_error"))
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


def _route(target: str) -> str:
    return urlsplit(target).path.rstrip("/")


def _error_body(message: str, type: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": None, "code": None}}


class FakeOpenAIServer:
    """A threaded HTTP server on 127.0.0.1 that plays scripted Chat Completions responses."""

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

    def _next(self) -> ScriptedResponse | None:
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def _record(self, handler: BaseHTTPRequestHandler, raw: bytes) -> RecordedRequest:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {name.lower(): value for name, value in handler.headers.items()}
        request = RecordedRequest(handler.command, handler.path, headers, body, raw)
        with self._lock:
            self.requests.append(request)
        return request


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """A started FakeOpenAIServer, stopped after the test."""
    with FakeOpenAIServer() as server:
        yield server
