"""A run's step as the recorder keeps it while it happens, and values cut to their columns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import Model

from chat import agent
from chat.agent import events
from chat.models import Message
from chat.models.runs import packed


def fit(model: type[Model], field: str, value: str) -> str:
    """A provider's value cut to its column: PostgreSQL refuses a longer one, and the whole
    turn's write (its message and tool calls) would be lost with it."""
    limit = getattr(model._meta.get_field(field), "max_length", None)
    return value if limit is None or len(value) <= limit else value[: limit - 1] + "…"


def raw_column(raw: events.RawStream) -> bytes:
    """A stream as a model call stores it, or nothing when AGENTLAB_STORE_RAW_STREAM is off."""
    if not settings.AGENTLAB_STORE_RAW_STREAM:
        return b""
    return packed("\n".join(f"{ms:g}\t{line}" for ms, line in raw))


@dataclass
class Step:
    number: int
    started: float
    request: dict[str, Any] = field(default_factory=dict)
    request_sha256: str = ""
    status_code: int | None = None
    attempts: int = 1
    first_token: float | None = None
    usage: events.Usage = field(default_factory=events.Usage)
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    url: str = ""
    raw: events.RawStream = ()
    preflight: list[str] = field(default_factory=list)
    model_call_saved: bool = False
    message: Message | None = None
    draft: Message | None = None
    """The reply row as last checkpointed while it streams; its turn's end completes it."""
    checkpointed: float = 0.0
    calls: list[agent.ToolCall] = field(default_factory=list)
    results: dict[str, events.ToolResult] = field(default_factory=dict)
