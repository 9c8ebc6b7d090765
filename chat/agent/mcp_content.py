"""What the model reads of an MCP tool result, and what a person is shown of it.

Both read the result as the server sent it (`CallToolResult` or its JSON, as stored). The model
gets text: text contents joined; structured content as JSON with its binary data named, not
copied (a 300 KB chart is one line, not 400,000 characters of base64); an image or audio one
line saying the user sees it; an embedded text resource its URI and text; a blob resource and a
resource link named. A person gets the media themselves (`media`), shown beside the call.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp import types as mcp_types

MAX_RESULT_CHARS = 100_000
"""The most of one result the model reads; the stored raw result keeps all of it."""
BINARY_CHARS = 512
"""A string at least this long, all base64, is binary data: named, never read out."""
CONTENT_TYPES = frozenset({"text", "image", "audio", "resource", "resource_link"})
SHOWN = "shown to the user"
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+)?((?:;[\w.+-]+=[\w.+-]+)*);base64,(.*)", re.S)


def as_json(result: mcp_types.CallToolResult | dict[str, Any]) -> dict[str, Any]:
    """A result as the JSON the server sent (the stored form)."""
    if isinstance(result, dict):
        return result
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def result_text(
    result: mcp_types.CallToolResult | dict[str, Any], *, limit: int = MAX_RESULT_CHARS
) -> str:
    """What the model reads of a result (an error result too), at most `limit` characters.

    Structured content comes as JSON after the result's own words; a text content that is
    only its JSON serialisation (how SDK servers mirror it) is not read twice. A structured
    `{"result": value}` around a plain value is read as the text (`5`, not `{"result": 5}`), and
    one that mirrors the content blocks (`{"result": [blocks]}`) as those blocks, once.
    """
    raw = as_json(result)
    blocks = [block for block in raw.get("content") or [] if isinstance(block, dict)]
    structured = raw.get("structuredContent")
    if structured is None or _wrapped(structured, blocks) or _mirrors(structured, blocks):
        parts = [_block_text(block) for block in blocks]
    else:
        own = [b for b in blocks if not (b.get("type") == "text" and _is_json(b.get("text")))]
        parts = [_block_text(b) for b in own if b.get("type") == "text"]
        parts.append(json.dumps(_named(structured), ensure_ascii=False))
        parts += [_block_text(b) for b in own if b.get("type") != "text"]
    return cut("\n".join(part for part in parts if part), limit)


def error_text(
    result: mcp_types.CallToolResult | dict[str, Any], *, limit: int = MAX_RESULT_CHARS
) -> str:
    """What the model reads of an `is_error` result: the same reading, or a plain failure."""
    return result_text(result, limit=limit) or "the tool failed"


def cut(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """`text`, or its first `limit` characters and a line saying how much was left out."""
    if len(text) <= limit:
        return text
    return (
        f"{text[:limit]}\n[cut: the first {limit:,} of {len(text):,} characters; "
        "the whole result is kept in the run's log]"
    )


@dataclass(frozen=True, slots=True)
class Media:
    """One thing of a result a person is shown: an image, a sound, a resource, a link.
    `path` locates its data in the stored result (for the media view)."""

    kind: str  # image, audio, text, blob, link
    mime_type: str
    path: tuple[str | int, ...]
    size: int = 0
    uri: str = ""
    name: str = ""
    text: str = ""


def media(result: mcp_types.CallToolResult | dict[str, Any]) -> list[Media]:
    """The media of a result, in order: content blocks first, then images or audio held in
    structured content (unless it mirrors the blocks)."""
    raw = as_json(result)
    found: list[Media] = []
    blocks = raw.get("content") or []
    for index, block in enumerate(blocks):
        if isinstance(block, dict):
            found += _block_media(block, ("content", index))
    structured = raw.get("structuredContent")
    if structured is not None and not _mirrors(structured, blocks):
        found += _binary_in(structured, ("structuredContent",))
    return found


def media_data(
    result: mcp_types.CallToolResult | dict[str, Any], path: tuple[str | int, ...]
) -> bytes | None:
    """The bytes at `path` of a stored result (base64 or a data: URL), None if there are none."""
    value: Any = as_json(result)
    for step in path:
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            return None
    if isinstance(value, dict):
        value = value.get("data") or value.get("blob")
    if not isinstance(value, str):
        return None
    matched = _DATA_URL.fullmatch(value)
    try:
        return base64.b64decode(matched.group(3) if matched else value, validate=False)
    except (binascii.Error, ValueError):
        return None


def for_display(value: Any) -> Any:
    """A stored result for a person to read as JSON: its binary data shortened (the media
    themselves are shown beside it), everything else as sent."""
    if isinstance(value, dict):
        return {key: for_display(item) for key, item in value.items()}
    if isinstance(value, list):
        return [for_display(item) for item in value]
    if isinstance(value, str) and _binary(value):
        return f"{value[:60]}… ({len(value):,} characters of base64)"
    return value


def _wrapped(structured: Any, blocks: list[dict[str, Any]]) -> bool:
    return (
        isinstance(structured, dict)
        and list(structured) == ["result"]
        and not isinstance(structured["result"], dict | list)
        and any(block.get("type") == "text" for block in blocks)
    )


def _mirrors(structured: Any, blocks: list[Any]) -> bool:
    """Structured content that is the content blocks again: `{"result": [blocks]}`."""
    if not (isinstance(structured, dict) and list(structured) == ["result"]):
        return False
    items = structured["result"]
    return (
        isinstance(items, list)
        and len(items) == len(blocks)
        and all(isinstance(item, dict) and item.get("type") in CONTENT_TYPES for item in items)
    )


def _is_json(text: Any) -> bool:
    if not isinstance(text, str) or not text.lstrip().startswith(("{", "[")):
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _block_text(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind in ("image", "audio"):
        size = _size(block.get("data"))
        return f"[{kind}: {block.get('mimeType') or '?'}, {size:,} bytes, {SHOWN}]"
    if kind == "resource":
        resource = block.get("resource") or {}
        uri, mime = resource.get("uri", "?"), resource.get("mimeType") or "?"
        if isinstance(resource.get("text"), str):
            return f"[resource {uri} ({mime})]\n{resource['text']}"
        size = _size(resource.get("blob"))
        return f"[resource {uri}: {mime}, {size:,} bytes, {SHOWN}]"
    if kind == "resource_link":
        name = block.get("title") or block.get("name") or ""
        described = f": {block['description']}" if block.get("description") else ""
        mime = f" ({block['mimeType']})" if block.get("mimeType") else ""
        return f"[resource link {name} {block.get('uri', '?')}{mime}{described}]"
    return f"[{kind or 'unknown'} content]"


def _named(value: Any) -> Any:
    """Structured content with binary data named in place of the data."""
    if isinstance(value, dict):
        data = value.get("data", value.get("blob"))
        if isinstance(data, str) and (value.get("mimeType") or value.get("type")):
            kind = value.get("type") if value.get("type") in ("image", "audio") else "binary data"
            return f"[{kind}: {value.get('mimeType') or '?'}, {_size(data):,} bytes, {SHOWN}]"
        return {key: _named(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_named(item) for item in value]
    if isinstance(value, str) and _binary(value):
        matched = _DATA_URL.fullmatch(value)
        mime = f"{matched.group(1) or '?'}, " if matched else ""
        return f"[binary data: {mime}{_size(value):,} bytes]"
    return value


def _binary(text: str) -> bool:
    if len(text) < BINARY_CHARS and not text.startswith("data:"):
        return False
    if text.startswith("data:") and _DATA_URL.fullmatch(text):
        return True
    return len(text) >= BINARY_CHARS and _BASE64.fullmatch(text) is not None


def _size(data: Any) -> int:
    """Bytes of base64 `data` (or of a data: URL), without decoding it."""
    if not isinstance(data, str):
        return 0
    matched = _DATA_URL.fullmatch(data)
    body = (matched.group(3) if matched else data).strip().rstrip("=")
    return len(body) * 3 // 4


def _block_media(block: dict[str, Any], path: tuple[str | int, ...]) -> list[Media]:
    kind = block.get("type")
    if kind in ("image", "audio"):
        mime = str(block.get("mimeType") or "")
        return [Media(kind, mime, path, size=_size(block.get("data")))]
    if kind == "resource":
        resource = block.get("resource") or {}
        uri, mime = str(resource.get("uri", "")), str(resource.get("mimeType") or "")
        if isinstance(resource.get("text"), str):
            return [Media("text", mime, path, uri=uri, text=resource["text"])]
        size = _size(resource.get("blob"))
        return [Media("blob", mime, (*path, "resource"), size=size, uri=uri)]
    if kind == "resource_link":
        name = str(block.get("title") or block.get("name") or "")
        mime = str(block.get("mimeType") or "")
        return [Media("link", mime, path, uri=str(block.get("uri", "")), name=name)]
    return []


def _binary_in(value: Any, path: tuple[str | int, ...]) -> list[Media]:
    """Images and audio held anywhere in structured content."""
    if isinstance(value, dict):
        if value.get("type") in ("image", "audio") and isinstance(value.get("data"), str):
            return _block_media(value, path)
        return [m for key, item in value.items() for m in _binary_in(item, (*path, key))]
    if isinstance(value, list):
        return [m for index, item in enumerate(value) for m in _binary_in(item, (*path, index))]
    matched = _DATA_URL.fullmatch(value) if isinstance(value, str) else None
    if matched:
        mime = matched.group(1) or ""
        kind = next((k for k in ("image", "audio") if mime.startswith(f"{k}/")), "blob")
        return [Media(kind, mime, path, size=_size(value))]
    return []
