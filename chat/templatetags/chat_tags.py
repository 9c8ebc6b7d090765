"""Template tags and filters for the chat pages and the admin: tool pills, pretty JSON, folded
text, tool display names, the sidebar's date groups, the ids of live fragments."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django import template
from django.contrib.humanize.templatetags.humanize import naturaltime
from django.template.loader import render_to_string
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timezone import localtime

from chat import search
from chat.agent import mcp_content
from chat.agent.tools import choice_label, humanize
from chat.models import ToolFailure
from chat.rendering import markdown
from chat.turns import PAGE_TEXT_CHARS

register = template.Library()

FOLD_AT = 600
"""Longer texts show their first FOLD_AT characters, with the whole text one click away."""
PILL_TEMPLATE = "chat/pill.html"
STATUS_TITLES = {
    "in_progress": "In progress",
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Cancelled",
    "unknown": "No execution log",
}
FAILURE_LABELS = dict(ToolFailure.choices)


@register.filter
def tool_choice(name: str) -> str:
    """A chosen tool as people read it (`docs__*`: "Every tool of docs")."""
    return choice_label(str(name))


@register.filter
def humanize_tool(name: str) -> str:
    """Display name of a tool: `search_cards` -> "Search cards"."""
    return humanize(str(name))


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
def binary_shortened(value: Any) -> Any:
    """A stored MCP result with its base64 shortened: its media are shown beside it."""
    return mcp_content.for_display(value)


@register.filter(name="markdown")
def markdown_filter(text: str | None) -> SafeString:
    """Model output as the chat page shows it: Markdown, highlighted code, sanitised; past
    PAGE_TEXT_CHARS only the start (the raw text beside it has it all)."""
    return markdown((text or "")[:PAGE_TEXT_CHARS])


@register.filter
def seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


@register.simple_tag
def timestamp(moment: datetime | None) -> SafeString:
    """A moment as `<time>`: relative ("5 minutes ago"), exact on hover and focus. The page's
    script keeps the relative text current and shows the exact one in the reader's time zone."""
    if moment is None:
        return SafeString("")
    exact = date_format(localtime(moment), "DATETIME_FORMAT")
    return format_html(
        '<time class="when" datetime="{}" title="{}" data-exact="{}" tabindex="0">{}</time>',
        moment.isoformat(),
        exact,
        exact,
        naturaltime(moment),
    )


@register.simple_tag
def folded(text: str | None, limit: int = FOLD_AT) -> SafeString:
    """Text in a <pre>; past `limit` characters, folded in a <details> that states the size.

    Never cut silently: the summary shows the start and the size, the whole text is inside.
    """
    text = text or ""
    if len(text) <= limit:
        return (
            format_html('<pre class="chat-pre" tabindex="0">{}</pre>', text)
            if text
            else SafeString("")
        )
    return format_html(
        '<details class="chat-fold"><summary><pre class="chat-pre">{}…</pre>'
        '<span class="chat-size">{} characters in all: show everything</span></summary>'
        '<pre class="chat-pre" tabindex="0">{}</pre></details>',
        text[:limit],
        f"{len(text):,}",
        text,
    )


def pill(
    name: str,
    status: str = "",
    error: str = "",
    url: str = "",
    element_id: str = "",
    detail: str = "",
    panel: str = "",
    failure: str = "",
) -> str:
    """A tool call as a pill, the one markup the chat, the live stream and the admin share.

    Its class says the status (`pill-failed` is struck through); its title says why it failed.
    With `failure` (a ToolFailure), the kind follows the name as text, "Search cards · invalid
    arguments", so it is in the pill's accessible name, and a class `pill-<failure>` says it.
    With `detail`, it is a button that loads the call's details from that address into the
    element `panel`; with `url`, a link.
    """
    status = status or "unknown"
    kind = FAILURE_LABELS.get(failure, failure.replace("_", " "))
    label: str = humanize(name)
    if kind:
        label = format_html(
            '<span class="pill-name">{}</span> <span class="pill-kind">· {}</span>', label, kind
        )
    context = {
        "label": label,
        "status": status,
        "failure": failure,
        "title": error
        or (kind.capitalize() if kind else "")
        or STATUS_TITLES.get(status, status.replace("_", " ").capitalize()),
        "url": url,
        "id": element_id,
        "detail": detail,
        "panel": panel,
    }
    return render_to_string(PILL_TEMPLATE, context)


register.simple_tag(pill, name="tool_pill")


@register.simple_tag
def fragment_id(*parts: object) -> str:
    """The id of an element a socket frame replaces: `fragment_id("reply", 5, "text")` is
    "reply-5-text". Python and templates both name such ids through it, so they cannot drift."""
    return "-".join(str(part) for part in parts)


@register.filter
def by_date(conversations: Iterable[Any]) -> list[search.DateGroup]:
    """The sidebar's conversations in date groups: Today, Yesterday, Previous 7 days, …"""
    return search.by_date(conversations)
