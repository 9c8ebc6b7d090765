"""Filters and tags the admin's transcript pages use: pretty JSON, folded text, tool pills."""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

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


@register.simple_tag
def folded(text: str | None, limit: int = FOLD_AT) -> SafeString:
    """Text in a <pre>; past `limit` characters, folded in a <details> that states the size.

    Never cut silently: the summary shows the start and the size, the whole text is inside.
    """
    text = text or ""
    if len(text) <= limit:
        return format_html('<pre class="chat-pre">{}</pre>', text) if text else SafeString("")
    return format_html(
        '<details class="chat-fold"><summary><pre class="chat-pre">{}…</pre>'
        '<span class="chat-size">{} characters in all: show everything</span></summary>'
        '<pre class="chat-pre">{}</pre></details>',
        text[:limit],
        f"{len(text):,}",
        text,
    )


@register.simple_tag
def tool_pill(name: str, status: str = "", error: str = "", url: str = "") -> SafeString:
    """A tool call as the chat shows it (`pill pill-<status>`, the error as its title)."""
    status = status or "unknown"
    title = error or (status.replace("_", " ").capitalize() if status != "unknown" else "No log")
    if url:
        return format_html(
            '<a class="pill pill-{}" href="{}" title="{}">{}</a>',
            status,
            url,
            title,
            humanize(name),
        )
    return format_html(
        '<span class="pill pill-{}" title="{}">{}</span>', status, title, humanize(name)
    )
