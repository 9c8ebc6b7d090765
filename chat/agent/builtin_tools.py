"""The built-in tools every run may offer: the clock, handoff notes, the demo knowledge cards."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

if TYPE_CHECKING:
    from .tools import ToolHandler, ToolRegistry

_TOOLS: list[tuple[dict[str, Any], ToolHandler]] = []


def _built_in(**spec: Any) -> Callable[[ToolHandler], ToolHandler]:
    def add(handler: ToolHandler) -> ToolHandler:
        _TOOLS.append((spec, handler))
        return handler

    return add


def register(registry: ToolRegistry) -> None:
    """Put the built-in tools in `registry`."""
    for spec, handler in _TOOLS:
        registry.tool(**spec)(handler)


@_built_in(
    read_only=True,
    name="get_current_time",
    description="Get the current date and time, optionally in an IANA time zone.",
    parameters={
        "type": "object",
        "properties": {
            "timezone": {
                "type": "string",
                "description": "IANA time zone name such as 'Europe/Paris'. Defaults to UTC.",
            }
        },
        "additionalProperties": False,
    },
)
def get_current_time(arguments: dict[str, Any]) -> dict[str, str]:
    zone_name = arguments.get("timezone") or "UTC"
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # "Europe" is a directory of zones
        raise ValueError(f"unknown time zone {zone_name!r}") from None
    now = datetime.now(UTC).astimezone(zone)
    return {"timezone": zone_name, "iso": now.isoformat(timespec="seconds")}


@_built_in(
    name="handoff_note",
    description="Record a handoff note for a human teammate to pick up later.",
    parameters={
        "type": "object",
        "properties": {
            "note": {"type": "string", "minLength": 1, "description": "What to hand off."},
            "recipient": {"type": "string", "description": "Who should pick it up."},
        },
        "required": ["note"],
        "additionalProperties": False,
    },
)
def handoff_note(arguments: dict[str, Any]) -> dict[str, str]:
    return {
        "status": "recorded",
        "note": arguments["note"],
        "recipient": arguments.get("recipient") or "the team",
    }


DEMO_CARDS: tuple[dict[str, str], ...] = (
    {"title": "Streaming replies", "body": "Replies stream token by token over a WebSocket."},
    {"title": "Tool pills", "body": "A finished reply names every tool it called as pills."},
    {"title": "Looking up", "body": "While a tool runs, a pulsing indicator names it."},
    {"title": "Strict history", "body": "Every tool call is answered before the next turn."},
    {"title": "Stop button", "body": "Stop cancels a run; unanswered tool calls are closed."},
    {"title": "Scripted model", "body": "An offline model that calls tools when asked."},
    {"title": "Admin transcripts", "body": "Runs, tool calls and model calls in the admin."},
    {"title": "Providers", "body": "Any OpenAI Chat Completions compatible endpoint works."},
)


_SEARCH_STOP_WORDS = """
    a an and are about also any card cards can do does find for from how i in is it leave look
    me my note of on or please search tell that the them there this to up what which with you
"""
_STOP_WORDS = frozenset(_SEARCH_STOP_WORDS.split())


@_built_in(
    read_only=True,
    name="search_cards",
    description="Search the team's knowledge cards by keywords; returns the best matches.",
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "Keywords to look for."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)
def search_cards(arguments: dict[str, Any]) -> dict[str, Any]:
    words = {word.strip(".,?!:;\"'").lower() for word in arguments["query"].split()}
    words -= _STOP_WORDS
    scored = []
    for card in DEMO_CARDS:
        text = f"{card['title']} {card['body']}".lower()
        score = sum(
            1 for word in words if len(word) > 2 and re.search(rf"\b{re.escape(word)}", text)
        )
        if score:
            scored.append((score, card))
    scored.sort(key=lambda item: -item[0])
    matches = [card for _, card in scored[: arguments.get("limit", 3)]]
    return {"query": arguments["query"], "matches": matches}
