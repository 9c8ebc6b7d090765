"""Parse an OpenAI Chat Completions SSE stream into StreamItems and one assistant message."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

from .errors import StreamError
from .events import ReasoningDelta, StreamItem, TextDelta, TurnEnd, Usage
from .messages import ChatMessage, ToolCall

MAX_EVENT_CHARS = 4_000_000
"""A multi-line `data:` event that grows past this without parsing is treated as malformed."""


async def sse_lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[str]:
    """The lines of an event stream's body (LF, CRLF or CR endings, UTF-8), without endings.

    One layer for what httpx's aiter_lines does in three (decode, split, join): a provider
    sends one HTTP chunk per token, and each layer is a generator step per chunk. Splitting
    the bytes is safe: a newline byte is never part of a multi-byte UTF-8 character.
    """
    pending = b""
    async for chunk in chunks:
        data = pending + chunk if pending else chunk
        held = b""
        if b"\r" in data:
            if data.endswith(b"\r"):
                data, held = data[:-1], b"\r"  # its LF may start the next chunk
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, rest = data.split(b"\n")
        pending = rest + held
        for line in lines:
            yield line.decode("utf-8", "replace")
    if pending:
        yield pending.rstrip(b"\r").decode("utf-8", "replace")


@dataclass(slots=True)
class _CallBuilder:
    index: int
    order: int
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    generated_id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def build(self) -> ToolCall:
        return ToolCall(
            id=self.id or self.generated_id, name=self.name, arguments="".join(self.arguments)
        )


class ChatCompletionStreamParser:
    """Turns stream lines or parsed chunks into deltas, and assembles the assistant message."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[_CallBuilder] = []
        self._by_index: dict[int, _CallBuilder] = {}
        self._by_id: dict[str, _CallBuilder] = {}
        self._finish_reason: str | None = None
        self._done = False
        self._data: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        ordered = sorted(self._calls, key=lambda call: (call.index, call.order))
        return tuple(call.build() for call in ordered)

    @property
    def finish_reason(self) -> str | None:
        return self._finish_reason

    @property
    def done(self) -> bool:
        return self._done

    def feed_line(self, line: str) -> list[StreamItem]:
        """Feed one SSE line (without its newline); returns the items it completes."""
        if line.startswith("data: {") and not self._data:
            # The common case, one JSON object per event, without the general path's steps.
            try:
                chunk = json.loads(line[6:])
            except ValueError:
                pass
            else:
                return self.feed_chunk(chunk)
        line = line.rstrip("\r")
        if not line:
            if self._data:
                self._malformed(f"unparseable data: {_clip(chr(10).join(self._data))}")
            return []
        if line.startswith(":"):
            return []
        name, _, value = line.partition(":")
        if name != "data":
            return []
        if value.startswith(" "):
            value = value[1:]
        if not value.strip() and not self._data:
            return []
        if value.strip() == "[DONE]":
            if self._data:
                self._malformed(f"unparseable data before [DONE]: {_clip(self._data[0])}")
            self._done = True
            return []
        return self._feed_data(value)

    def feed_chunk(self, chunk: dict[str, Any]) -> list[StreamItem]:
        """Feed one parsed chunk; returns the deltas and usage it carries."""
        if not isinstance(chunk, dict):
            self._malformed(f"a chunk must be a JSON object, got {type(chunk).__name__}")
        error = chunk.get("error")
        if error:
            raise StreamError(
                f"the provider reported an error mid-stream: {_error_text(error)}",
                partial=self.partial(),
            )
        items: list[StreamItem] = []
        choices = chunk.get("choices")
        if choices is not None:
            if not isinstance(choices, list):
                self._malformed(f"'choices' must be a list, got {type(choices).__name__}")
            for choice in choices:
                if not isinstance(choice, dict):
                    self._malformed("a choice must be a JSON object")
                if choice.get("index", 0) == 0:
                    items.extend(self._feed_choice(choice))
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            items.append(_usage(usage))
        return items

    def partial(self) -> ChatMessage | None:
        """The text and reasoning streamed so far, or None if nothing streamed."""
        text, reasoning = self.text, self.reasoning
        if not text and not reasoning:
            return None
        return ChatMessage(role="assistant", content=text or None, reasoning=reasoning or None)

    def finish(self) -> TurnEnd:
        """Call at the end of the stream; raises StreamError if the turn never finished."""
        if self._data:
            self._malformed(f"the stream ended inside an event: {_clip(chr(10).join(self._data))}")
        if self._finish_reason is None:
            raise StreamError("the stream ended before a finish_reason", partial=self.partial())
        message = ChatMessage(
            role="assistant",
            content=self.text or None,
            tool_calls=self.tool_calls,
            reasoning=self.reasoning or None,
        )
        return TurnEnd(message=message, finish_reason=self._finish_reason)

    def _feed_data(self, value: str) -> list[StreamItem]:
        self._data.append(value)
        document = "\n".join(self._data)
        try:
            chunk = json.loads(document)
        except ValueError:
            if len(self._data) > 1 and _parses(value):
                # The earlier lines never became a document, and this line starts a new one.
                self._malformed(f"unparseable data: {_clip(self._data[0])}")
            if len(document) > MAX_EVENT_CHARS:
                self._malformed(f"an event grew past {MAX_EVENT_CHARS} characters unparsed")
            return []
        self._data.clear()
        return self.feed_chunk(chunk)

    def _feed_choice(self, choice: dict[str, Any]) -> list[StreamItem]:
        items: list[StreamItem] = []
        delta = choice.get("delta")
        if delta is None:
            delta = {}
        if not isinstance(delta, dict):
            self._malformed(f"'delta' must be a JSON object, got {type(delta).__name__}")
        content = delta.get("content")
        if content is not None and not isinstance(content, str):
            self._malformed(f"'content' must be a string, got {type(content).__name__}")
        reasoning = delta.get("reasoning_content")
        if not isinstance(reasoning, str) or not reasoning:
            # Some servers send the same text under both names: only one of them counts.
            reasoning = delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            self._reasoning.append(reasoning)
            items.append(ReasoningDelta(reasoning))
        if content:
            self._text.append(content)
            items.append(TextDelta(content))
        fragments = delta.get("tool_calls")
        if fragments is not None:
            if not isinstance(fragments, list):
                self._malformed(f"'tool_calls' must be a list, got {type(fragments).__name__}")
            for fragment in fragments:
                self._merge(fragment)
        legacy = delta.get("function_call")
        if isinstance(legacy, dict):
            self._merge({"function": legacy})
        finish_reason = choice.get("finish_reason")
        if isinstance(finish_reason, str) and finish_reason and self._finish_reason is None:
            self._finish_reason = (
                "tool_calls" if finish_reason == "function_call" else finish_reason
            )
        return items

    def _merge(self, fragment: Any) -> None:
        if not isinstance(fragment, dict):
            self._malformed("a tool call fragment must be a JSON object")
        function = fragment.get("function") or {}
        if not isinstance(function, dict):
            self._malformed("a tool call fragment's 'function' must be a JSON object")
        call_id = fragment.get("id") if isinstance(fragment.get("id"), str) else None
        name = function.get("name") if isinstance(function.get("name"), str) else ""
        call = self._target(fragment.get("index"), call_id or None, bool(name))
        if call_id and call.id is None:
            call.id = call_id
            self._by_id[call_id] = call
        if name and name != call.name:
            # Usually the name comes once; a repeated full name is not a new piece of it.
            call.name += name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments.append(arguments)
        elif arguments is not None:
            call.arguments.append(json.dumps(arguments, ensure_ascii=False))

    def _target(self, index: Any, call_id: str | None, named: bool) -> _CallBuilder:
        if isinstance(index, int) and not isinstance(index, bool):
            known = self._by_index.get(index)
            starts_another = (
                known is not None and call_id is not None and known.id not in (None, call_id)
            )
            if known is not None and not (starts_another and named):
                return known
            return self._new_call(index)
        if call_id is not None:
            known = self._by_id.get(call_id)
            return known if known is not None else self._new_call(None)
        return self._calls[-1] if self._calls else self._new_call(None)

    def _new_call(self, index: int | None) -> _CallBuilder:
        if index is None:
            index = max((call.index for call in self._calls), default=-1) + 1
        call = _CallBuilder(index=index, order=len(self._calls))
        self._calls.append(call)
        self._by_index[index] = call
        return call

    def _malformed(self, detail: str) -> NoReturn:
        self._data.clear()
        raise StreamError(f"malformed stream chunk: {detail}", partial=self.partial())


def _parses(value: str) -> bool:
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


def _usage(data: dict[str, Any]) -> Usage:
    prompt = _count(data.get("prompt_tokens"))
    completion = _count(data.get("completion_tokens"))
    total = data.get("total_tokens")
    return Usage(prompt, completion, _count(total) if total is not None else prompt + completion)


def _count(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int | float):
        return int(value)
    return 0


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        message = error.get("message")
        text = message if isinstance(message, str) and message else json.dumps(error)
        code = error.get("code") or error.get("type")
        return f"{text} ({code})" if isinstance(code, str | int) and str(code) not in text else text
    return str(error)


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
