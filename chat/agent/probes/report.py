"""What a provider probe found: the report, its verdicts and the profile settings it implies."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from datetime import date
from typing import Any

from ..messages import EmptyContent

CHAT_PROMPT = "Reply with one short sentence that contains the word pong."
TOOL_PROMPT = "What time is it in UTC? Call the get_current_time tool to find out."
TOOL_NAME = "get_current_time"
TOOL_REPLY = json.dumps({"timezone": "UTC", "iso": "2025-01-01T12:00:00+00:00"})
REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_details", "thinking")
CONTENT_FORMS: tuple[EmptyContent, ...] = ("empty", "null", "omit")
CONTENT_SHOWN = {"empty": '""', "null": "null", "omit": "omitted"}
IMAGE_PROMPT = "What colour is this image? Answer with one word."
IMAGE_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAABAAAAAQCAIAAACQkWg2AAAAGklEQVR42mO8IyfHQApgYiARjGoY1TB0NAAAjEs"
    "BOPY5fDQAAAAASUVORK5CYII="
)
"""A 16 by 16 red square, base64: the image the image probe sends."""
FOREIGN_ID = "call_probe_0001"
"""A tool call id of our making, not the server's: servers like Mistral refuse it."""
ALNUM9 = re.compile(r"^[a-zA-Z0-9]{9}$")
REFUSED = (400, 422)


@dataclass
class Turn:
    """What one streamed request showed."""

    ok: bool = False
    error: str = ""
    http_status: int | None = None
    streamed: bool | None = None
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    reasoning_fields: list[str] = field(default_factory=list)
    time_to_first_token: float | None = None
    duration: float = 0.0


@dataclass
class Report:
    """Everything check_provider found; `works` is what its exit status says."""

    base_url: str
    model: str = ""
    api_key_set: bool = False
    unreachable: str = ""
    models: list[str] | None = None
    models_error: str = ""
    chat: Turn | None = None
    tools: Turn | None = None
    content: dict[str, Turn] = field(default_factory=dict)
    configured_content: str = "empty"
    problem: str = ""
    parallel_tool_calls: bool | None = None
    """Whether the tool probe went through with `parallel_tool_calls` (None: not known)."""
    parallel_error: str = ""
    """The refusal, when the server refused `parallel_tool_calls` (then probed without it)."""
    foreign_ids: Turn | None = None
    """The follow-up sent back with the id FOREIGN_ID instead of the server's own (if probed)."""
    images: Turn | None = None
    """A user message with a small PNG as an image_url part (sent once chat works)."""

    @property
    def chat_works(self) -> bool:
        return self.chat is not None and self.chat.ok and bool(self.chat.text.strip())

    @property
    def tool_calling_works(self) -> bool:
        calls = self.tools.tool_calls if self.tools is not None and self.tools.ok else []
        called = any(call["name"] == TOOL_NAME and call["arguments_valid"] for call in calls)
        return called and any(turn.ok for turn in self.content.values())

    @property
    def works(self) -> bool:
        return self.chat_works and self.tool_calling_works

    @property
    def reasoning_fields(self) -> list[str]:
        turns = [self.chat, self.tools, *self.content.values()]
        seen = [name for turn in turns if turn is not None for name in turn.reasoning_fields]
        return list(dict.fromkeys(seen))

    @property
    def accepted_content(self) -> list[EmptyContent]:
        """The forms of a tool-call-only message's content the server took, "" first."""
        return [form for form in CONTENT_FORMS if form in self.content and self.content[form].ok]

    @property
    def server_ids(self) -> list[str]:
        """The ids of the tool calls the server made."""
        return [call["id"] for call in self.tools.tool_calls] if self.tools is not None else []

    @property
    def server_ids_alnum9(self) -> bool:
        ids = self.server_ids
        return bool(ids) and all(ALNUM9.match(call_id) for call_id in ids)

    @property
    def foreign_ids_refused(self) -> bool | None:
        """Whether the server refused a tool round under an id it did not make (None: unknown).

        The probe differs from an accepted follow-up only by its id, so a 400 or 422 is the id.
        """
        turn = self.foreign_ids
        if turn is None:
            return None
        if turn.ok:
            return False
        return True if turn.http_status in REFUSED else None

    @property
    def accepts_images(self) -> bool | None:
        """Whether the model took an image: False when it was refused (400 or 422), None when
        not probed or the answer says neither."""
        turn = self.images
        if turn is None:
            return None
        if turn.ok:
            return True
        return False if turn.http_status in REFUSED else None

    @property
    def tool_call_ids(self) -> str:
        """The profile setting: "alnum9" when ids must match ^[a-zA-Z0-9]{9}$, else "any"."""
        return "alnum9" if self.server_ids_alnum9 or self.foreign_ids_refused else "any"

    @property
    def recommended_content(self) -> str | None:
        """The AGENTLAB_TOOL_CALL_CONTENT value to use: the configured one if accepted."""
        accepted = [
            form for form in CONTENT_FORMS if form in self.content and self.content[form].ok
        ]
        if self.configured_content in accepted:
            return self.configured_content
        return accepted[0] if accepted else None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            chat_works=self.chat_works,
            tool_calling_works=self.tool_calling_works,
            works=self.works,
            reasoning_fields=self.reasoning_fields,
            recommended_tool_call_content=self.recommended_content,
            foreign_ids_refused=self.foreign_ids_refused,
            tool_call_ids=self.tool_call_ids,
            accepts_images=self.accepts_images,
        )
        return data


def profile_fields(report: Report, *, today: date | None = None) -> dict[str, Any]:
    """The quirks of a ProviderProfile as the probe found them (no name, URL or key)."""
    accepted = report.accepted_content
    return {
        "model": report.model,
        "tool_call_content": accepted[0] if accepted else "empty",
        "tool_call_ids": report.tool_call_ids,
        "reasoning_field": (
            "reasoning_content" if "reasoning_content" in report.reasoning_fields else ""
        ),
        "parallel_tool_calls": report.parallel_tool_calls is not False,
        "accepts_images": report.accepts_images,
        "notes": summary(report, today=today),
    }


def summary(report: Report, *, today: date | None = None) -> str:
    """A short account of what the probe found, dated, for a profile's notes."""
    day = (today or date.today()).isoformat()
    parts = [f"check_provider {day}: model {report.model}"]
    chat = report.chat
    if chat is not None:
        parts.append("chat ok" if report.chat_works else f"chat failed ({clip(chat.error, 60)})")
        usage = chat.usage or (report.tools.usage if report.tools else None)
        parts.append("usage chunk " + ("yes" if usage else "no"))
    if report.tools is not None:
        if report.tools.tool_calls:
            parts.append(f"tool calls with finish_reason {report.tools.finish_reason}")
        else:
            parts.append("no tool call")
    if report.content:
        verdicts = [
            f"{CONTENT_SHOWN[form]} {'ok' if turn.ok else 'refused'}"
            for form, turn in report.content.items()
        ]
        parts.append("tool-call-only content: " + ", ".join(verdicts))
    if report.accepts_images is not None:
        parts.append("images " + ("ok" if report.accepts_images else "refused"))
    if report.parallel_tool_calls is False:
        parts.append(f"parallel_tool_calls refused ({clip(report.parallel_error, 60)})")
    elif report.parallel_tool_calls:
        parts.append("parallel_tool_calls ok")
    ids = "own ids 9 letters/digits" if report.server_ids_alnum9 else "own ids free-form"
    refused = report.foreign_ids_refused
    if refused is not None:
        ids += f", {FOREIGN_ID} {'refused' if refused else 'ok'}"
    parts.append(f"tool call ids: {ids}")
    fields = report.reasoning_fields
    parts.append("reasoning: " + (", ".join(fields) if fields else "none seen"))
    return "; ".join(parts) + "."


def clip(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
