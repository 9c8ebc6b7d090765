"""How messages go on the wire for one provider: the quirks that differ between real servers."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .contracts import AgentParameters
from .messages import ChatMessage, EmptyContent
from .tools import ToolDefinition

ToolCallIds = Literal["any", "alnum9"]
ReasoningField = Literal["", "reasoning_content", "reasoning"]
_ALNUM9 = re.compile(r"^[a-zA-Z0-9]{9}$")
_BASE62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class WireFormat:
    """Provider quirks. The defaults suit OpenAI and most compatible servers.

    - empty_content: content of a tool-call-only assistant message (`""`, null, or no key).
    - tool_call_ids: "alnum9" for servers that accept only `^[a-zA-Z0-9]{9}$` ids (Mistral);
      other ids are mapped to such ids, the same way every time.
    - reasoning_field: send an assistant message's reasoning back under this field, for the
      messages after the last user message (DeepSeek wants `reasoning_content` after tool calls);
      "" drops it.
    - parallel_tool_calls: whether to send `parallel_tool_calls` with the tools.
    """

    empty_content: EmptyContent = "empty"
    tool_call_ids: ToolCallIds = "any"
    reasoning_field: ReasoningField = ""
    parallel_tool_calls: bool = True

    def tool_call_id(self, call_id: str) -> str:
        if self.tool_call_ids == "alnum9" and not _ALNUM9.match(call_id):
            return alnum9(call_id)
        return call_id

    def messages(self, messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
        """The `messages` array of a request."""
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        wire = []
        for index, message in enumerate(messages):
            data = message.to_openai(empty_content=self.empty_content)
            if self.tool_call_ids != "any":
                if "tool_calls" in data:
                    for call in data["tool_calls"]:
                        call["id"] = self.tool_call_id(call["id"])
                if "tool_call_id" in data:
                    data["tool_call_id"] = self.tool_call_id(data["tool_call_id"])
            if (
                self.reasoning_field
                and message.role == "assistant"
                and message.reasoning
                and index > last_user
            ):
                data[self.reasoning_field] = message.reasoning
            wire.append(data)
        return wire


def alnum9(value: str) -> str:
    """A stable 9-character alphanumeric id for any string."""
    number = int.from_bytes(hashlib.sha256(value.encode()).digest()[:8], "big")
    digits = []
    for _ in range(9):
        number, remainder = divmod(number, 62)
        digits.append(_BASE62[remainder])
    return "".join(digits)


def build_request_body(
    messages: Sequence[ChatMessage],
    *,
    model: str,
    tools: Sequence[ToolDefinition],
    parameters: AgentParameters,
    wire: WireFormat | None = None,
    stream: bool = True,
) -> dict[str, Any]:
    """The Chat Completions request body; `tools` and its options only when there are tools."""
    wire = wire or WireFormat()
    body: dict[str, Any] = {
        "model": parameters.model or model,
        "messages": wire.messages(messages),
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if parameters.temperature is not None:
        body["temperature"] = parameters.temperature
    if parameters.top_p is not None:
        body["top_p"] = parameters.top_p
    if parameters.max_tokens is not None:
        body["max_tokens"] = parameters.max_tokens
    if tools:
        body["tools"] = [tool.to_openai() for tool in tools]
        body["tool_choice"] = "auto"
        if wire.parallel_tool_calls:
            body["parallel_tool_calls"] = True
    return body


def encode_body(body: Any) -> bytes:
    """The exact bytes a request body is sent as: the one encoding its stored hash is checked by."""
    return json.dumps(body, ensure_ascii=False).encode()


def payload_sha256(payload: bytes) -> str:
    """The hex sha256 of a sent payload, which proves a stored copy of the body exact."""
    return hashlib.sha256(payload).hexdigest()


def offered_tools(body: Any) -> list[str]:
    """The function names a request body offered under `tools`, in order, once each.

    Read back from stored JSON, so anything that is not a named function is skipped.
    """
    tools = body.get("tools") if isinstance(body, dict) else None
    names: list[str] = []
    for tool in tools if isinstance(tools, list) else ():
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str) and name not in names:
            names.append(name)
    return names
