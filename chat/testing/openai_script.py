"""Scripted Chat Completions responses, and the request checks of a strict provider."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
    peer: tuple[str, int] = ("", 0)
    """The client's address and port: one per connection."""


@dataclass(frozen=True)
class ScriptedResponse:
    """One scripted answer: a JSON body (errors), or SSE chunks with optional raw control.

    Raw control, e.g. `text_turn("hi").but(cut_after=2)`: `delay` waits before the headers,
    `chunk_delay` before every chunk, `stall=(n, seconds)` pauses once after n chunks,
    `cut_after=n` hangs up after n chunks (no [DONE], no end of body), `done=False` leaves out
    `data: [DONE]`; `sse()` takes raw lines as strings, to send malformed data.
    """

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
    body = error_body(message, type)
    return ScriptedResponse(status=status, json_body=body, headers=tuple((headers or {}).items()))


def error_body(message: str, type: str = "invalid_request_error") -> dict[str, Any]:
    """The body of an OpenAI error response."""
    return {"error": {"message": message, "type": type, "param": None, "code": None}}


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
        if isinstance(message["content"], list):
            problem = check_content_parts(where, role, message["content"])
            if problem:
                return problem
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


_PART_TYPES: dict[str, tuple[str, ...]] = {
    "system": ("text",),
    "user": ("text", "image_url", "input_audio", "file"),
    "assistant": ("text", "refusal"),
    "tool": ("text",),
}
_IMAGE_URL = re.compile(r"data:image/(png|jpeg|gif|webp);base64,([A-Za-z0-9+/]+={0,2})\Z")


def check_content_parts(where: str, role: str, parts: list[Any]) -> str | None:
    """A content-part array as OpenAI's request schema takes it: per role the part types it
    allows, a text part's string, an image part's URL (https or a base64 data URL of an image
    type the API reads) and detail."""
    if not parts:
        return f"{where}.content: [] is too short"
    for index, part in enumerate(parts):
        at = f"{where}.content[{index}]"
        if not isinstance(part, dict):
            return f"{at} must be an object"
        kind = part.get("type")
        if kind not in _PART_TYPES[role]:
            return f"{at}.type: {kind!r} is not allowed in a {role} message"
        extra = set(part) - {"type", kind}
        if extra:
            return f"{at}: unrecognized key(s) {sorted(extra)}"
        if kind == "text" and not isinstance(part.get("text"), str):
            return f"{at}.text must be a string"
        if kind == "image_url":
            image = part.get("image_url")
            if not isinstance(image, dict) or not isinstance(image.get("url"), str):
                return f"{at}.image_url.url must be a string"
            if set(image) - {"url", "detail"} or image.get("detail", "auto") not in (
                "auto",
                "low",
                "high",
            ):
                return f"{at}.image_url: only 'url' and 'detail' (auto, low, high) are allowed"
            url = image["url"]
            if not url.startswith("https://"):
                match = _IMAGE_URL.match(url)
                if match is None:
                    return f"{at}.image_url.url: not an https URL or a base64 image data URL"
                try:
                    base64.b64decode(match.group(2), validate=True)
                except binascii.Error:
                    return f"{at}.image_url.url: the data URL's base64 does not decode"
    return None


def has_image(body: Any) -> bool:
    """Whether a request body sends an image part (what a text-only model refuses)."""
    for message in body.get("messages") or () if isinstance(body, dict) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(p, dict) and p.get("type") == "image_url" for p in content
        ):
            return True
    return False


def text_only(body: Any) -> str | None:
    """A `FakeOpenAIServer.checks` entry: a model that takes no images refuses one, as OpenAI's
    text-only models do."""
    if has_image(body):
        return "Invalid content type. image_url is only supported by certain models."
    return None
