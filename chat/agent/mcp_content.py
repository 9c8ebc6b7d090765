"""What the model reads of an MCP tool result."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp import types as mcp_types


def result_text(result: mcp_types.CallToolResult) -> str:
    """What the model reads of a result: `structured_content` as JSON when present, else the
    text contents joined; images, audio and resources summarised (type and size).

    A structured `{"result": value}` around a plain value (how SDK servers return a string or
    a number) is read as its text: the model gets `5`, not `{"result": 5}`.
    """
    structured = result.structured_content
    wrapped = (
        isinstance(structured, dict)
        and list(structured) == ["result"]
        and not isinstance(structured["result"], dict | list)
        and any(part.type == "text" for part in result.content)
    )
    if structured is not None and not wrapped:
        text = json.dumps(result.structured_content, ensure_ascii=False)
        others = [_summary(part) for part in result.content if part.type != "text"]
        return "\n".join([text, *others])
    return "\n".join(
        part.text if part.type == "text" else _summary(part) for part in result.content
    )


def _summary(part: Any) -> str:
    kind = getattr(part, "type", "content")
    if kind in ("image", "audio"):
        size = len(getattr(part, "data", "") or "") * 3 // 4
        return f"[{kind}: {getattr(part, 'mime_type', '?')}, {size:,} bytes]"
    if kind == "resource":
        resource = part.resource
        body = getattr(resource, "text", None) or getattr(resource, "blob", "") or ""
        mime = getattr(resource, "mime_type", None) or "?"
        return f"[resource: {resource.uri}, {mime}, {len(body):,} characters]"
    if kind == "resource_link":
        return f"[resource link: {part.uri}]"
    return f"[{kind}]"


def error_text(result: mcp_types.CallToolResult) -> str:
    """The server's message of an `is_error` result."""
    return " ".join(p.text for p in result.content if p.type == "text") or "the tool failed"
