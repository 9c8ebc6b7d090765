"""Filters and tags the admin's transcript pages use: pretty JSON, folded text, tool pills."""

from __future__ import annotations

import json
from typing import Any

from django import template

from chat.agent.tools import humanize

register = template.Library()

FOLD_AT = 600
"""Longer texts show their first FOLD_AT characters, with the whole text one click away."""


def pretty(text: str | None) -> str:
    """JSON text indented for reading; any other text as it is."""
    if not text:
        return text or ""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if not isinstance(value, dict | list):
        return text
    return json.dumps(value, indent=2, ensure_ascii=False)


@register.filter
def pretty_json(value: Any) -> str:
    """A JSON string or a decoded JSON value, indented."""
    if isinstance(value, str):
        return pretty(value)
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


@register.filter
def seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def fold_context(text: str | None, limit: int = FOLD_AT) -> dict[str, Any]:
    text = text or ""
    return {
        "text": text,
        "head": text[:limit],
        "folded": len(text) > limit,
        "size": f"{len(text):,}",
    }


@register.inclusion_tag("admin/chat/includes/folded.html")
def folded(text: str | None, limit: int = FOLD_AT) -> dict[str, Any]:
    """Text in a <pre>; past `limit` characters, folded in a <details> that states the size."""
    return fold_context(text, limit)


def pill_context(name: str, status: str = "", error: str = "", url: str = "") -> dict[str, Any]:
    return {
        "label": humanize(name),
        "name": name,
        "status": status or "unknown",
        "title": error or f"{name}: {status or 'no execution log'}",
        "url": url,
    }


@register.inclusion_tag("admin/chat/includes/tool_pill.html")
def tool_pill(name: str, status: str = "", error: str = "", url: str = "") -> dict[str, Any]:
    """A tool call as the chat shows it: its display name, styled by status; errors as title."""
    return pill_context(name, status, error, url)
