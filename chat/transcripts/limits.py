"""The bounded gate: what a stored JSON value may hold, and how an imported line is read.

Every JSON value a person or a file supplies passes `load_json` (text) or `storable` (a value
built from it) before it is stored: an annotation's expected arguments, a case from the chat,
`manage.py cases` and `import_transcripts`, MCP configuration. The bounds of the record fields
apply under the import context (`import_context()`, which `records.parse_line` and the case
import pass): they keep out what the database cannot store, or the web would not accept. The
export builds the same records from stored rows without that context, so a row stored under
older or looser limits still exports.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Final, NoReturn

from django.conf import settings
from pydantic import AfterValidator, BeforeValidator, Field, ValidationError, ValidationInfo

from chat.agent.contracts import error_text

from .forks import MAX_TOOL_RESULT_CHARS

DB_INT_MAX: Final = 2_147_483_647
"""The largest value a PositiveIntegerField holds on every database Django supports."""
NAME_CHARS: Final = 200
"""The CharField(max_length=200) columns: call ids, tool names, models, titles, workers."""
MAX_TEXT_CHARS: Final = 1_000_000
"""Assistant and system content, reasoning, arguments, errors: more than any model writes in
one message (output limits are near 128k tokens, about 500k characters)."""
MAX_LOG_CHARS: Final = 64_000_000
"""A model call's raw stream: a long reply streams as a log tens of times its size."""
MAX_ROWS: Final = 100_000
"""Messages, runs, tool and model calls of a run, history repairs: in one record."""
MAX_PARTS: Final = 1_000
"""Tool calls and content parts of one message, tools offered, preflight notes."""
MAX_DEPTH: Final = 64
"""JSON nesting: deep enough for any tool's parameter schema, far below the recursion limit."""
MAX_REASONS: Final = 3
"""Validation errors named in a refusal; a hostile line can hold thousands."""
NOTE_CHARS: Final = 10_000
"""A note on an annotation or a case, however it arrives: the page, the admin, a command."""
ARGUMENT_CHARS: Final = 20_000
"""Expected arguments as typed (JSON text), in a form or on the command line."""

_NOT_TEXT = re.compile("[\ud800-\udfff\x00]")


def import_context() -> dict[str, Any]:
    """The validation context of an imported line: the bounds apply, user messages get the web's
    limit, and what was folded is noted in `notes` for the reader."""
    return {
        "importing": True,
        "max_message_chars": settings.AGENTLAB_MAX_MESSAGE_CHARS,
        "notes": [],
    }


def importing(info: ValidationInfo) -> bool:
    return bool((info.context or {}).get("importing"))


def at_most(limit: int) -> BeforeValidator:
    """A bound on a string's or a list's length, checked before a list's items are."""

    def check(value: Any, info: ValidationInfo) -> Any:
        if importing(info) and isinstance(value, str | list) and len(value) > limit:
            unit = "characters" if isinstance(value, str) else "items"
            raise ValueError(f"{len(value):,} {unit}, more than the {limit:,} allowed")
        return value

    return BeforeValidator(check)


def _fits_a_column(value: int, info: ValidationInfo) -> int:
    if importing(info) and value > DB_INT_MAX:
        raise ValueError(f"more than {DB_INT_MAX:,}, the largest the database holds")
    return value


def _utc(value: datetime) -> datetime:
    """Aware and in UTC, as Django stores it; a naive time is read as UTC."""
    try:
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError:
        raise ValueError("the date is out of range") from None


Count = Annotated[int, Field(ge=0), AfterValidator(_fits_a_column)]
Seconds = Annotated[float, Field(allow_inf_nan=False)]
Timestamp = Annotated[datetime, AfterValidator(_utc)]
Name = Annotated[str, at_most(NAME_CHARS)]
Text = Annotated[str, at_most(MAX_TEXT_CHARS)]
Log = Annotated[str, at_most(MAX_LOG_CHARS)]
ROWS: Final = at_most(MAX_ROWS)
PARTS: Final = at_most(MAX_PARTS)


def _joined(value: Any, info: ValidationInfo) -> Any:
    """OpenAI content parts as one text: the text parts, a blank line between them.

    Any other part (image_url, input_audio, file, refusal) refuses the message instead of being
    kept as words: the core's content is text, a placeholder where an image was would replay as
    another conversation, and an image's data: URL is megabytes of base64 in a text message.
    """
    if not isinstance(value, list):
        return value
    if importing(info) and len(value) > MAX_PARTS:
        raise ValueError(f"{len(value):,} content parts, more than the {MAX_PARTS:,} allowed")
    texts = []
    for part in value:
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            raise ValueError("a content part must be an object with a type")
        if kind != "text":
            raise ValueError(
                f"content part of type {kind[:40]!r} is not supported: only text parts are imported"
            )
        if not isinstance(part.get("text"), str):
            raise ValueError("a text part needs a text")
        texts.append(part["text"])
    return "\n\n".join(texts)


def content_within_limits(value: str | None, info: ValidationInfo) -> str | None:
    """A message's content by its role: a user message as long as the web accepts, system and
    assistant content MAX_TEXT_CHARS; a tool result is folded by the record, not refused."""
    role = info.data.get("role")
    if value is None or not importing(info) or role == "tool":
        return value
    if role == "user":
        limit = int((info.context or {})["max_message_chars"])
        if len(value) > limit:
            raise ValueError(
                f"the user message is {len(value):,} characters, more than the {limit:,} the "
                "web accepts"
            )
    elif len(value) > MAX_TEXT_CHARS:
        raise ValueError(f"{len(value):,} characters, more than the {MAX_TEXT_CHARS:,} allowed")
    return value


Content = Annotated[str | None, BeforeValidator(_joined), AfterValidator(content_within_limits)]
"""A message's content: text parts joined, within its role's limit (the role comes first)."""


def folded(text: str, where: str, info: ValidationInfo) -> str:
    """A tool result past MAX_TOOL_RESULT_CHARS (the web's limit on an edited result): its start,
    a line saying it was folded, and a note for the reader.

    Folded rather than refused: a tool (a page fetch, a file read) may rightly return megabytes,
    and the conversation stays importable, and every later request sendable.
    """
    if not importing(info) or len(text) <= MAX_TOOL_RESULT_CHARS:
        return text
    size = f"first {MAX_TOOL_RESULT_CHARS:,} of {len(text):,} characters"
    (info.context or {}).setdefault("notes", []).append(f"{where} folded to its {size}")
    return f"{text[:MAX_TOOL_RESULT_CHARS]}\n\n[folded on import: the {size}]"


class JsonRefused(ValueError):
    """A JSON text or value the gate keeps out; the text says why, in one line.

    `reason` is why, without "not JSON: "; `decoding` is the parser's error when the text is
    not JSON at all (it says where).
    """

    def __init__(
        self, reason: str, *, json_text: bool = True, decoding: json.JSONDecodeError | None = None
    ) -> None:
        super().__init__(reason if json_text else f"not JSON: {reason}")
        self.reason = reason
        self.decoding = decoding


def load_json(text: str, *, max_chars: int | None = None) -> Any:
    """`text` as JSON that can be stored; raises JsonRefused saying why not.

    Refused: text longer than `max_chars`, NaN, Infinity and numbers past a float (not JSON,
    and PostgreSQL's jsonb rejects them), nesting past MAX_DEPTH (the parser would recurse
    into a RecursionError), and what `storable` refuses.
    """
    if max_chars is not None and len(text) > max_chars:
        raise JsonRefused(f"{len(text):,} characters, more than the {max_chars:,} allowed")
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise JsonRefused(f"nested more than {MAX_DEPTH} levels deep") from None
    except json.JSONDecodeError as exc:
        raise JsonRefused(str(exc), json_text=False, decoding=exc) from None
    except ValueError as exc:
        raise JsonRefused(str(exc), json_text=False) from None
    return storable(data)


def storable(value: Any) -> Any:
    """`value` when every database stores it as JSON and every page renders it back; raises
    JsonRefused saying why not.

    Refused: nesting past MAX_DEPTH, numbers that are not finite, and strings (keys too) that
    hold a lone surrogate (not text: no page can encode it) or a NUL (PostgreSQL keeps none).
    """
    level, depth = [value], 0
    while level:
        for item in level:
            if isinstance(item, str) and (found := _NOT_TEXT.search(item)):
                raise JsonRefused(_not_text(found.group()))
            if isinstance(item, float) and not math.isfinite(item):
                raise JsonRefused(f"{item} is not a JSON number")
        containers = [item for item in level if isinstance(item, dict | list | tuple)]
        depth += bool(containers)
        if depth > MAX_DEPTH:
            raise JsonRefused(f"nested more than {MAX_DEPTH} levels deep")
        level = [
            child
            for item in containers
            for child in ([*item, *item.values()] if isinstance(item, dict) else item)
        ]
    return value


def _not_text(character: str) -> str:
    if character == "\x00":
        return "a string holds a NUL character (\\u0000), which the database cannot store"
    return "a string holds a lone surrogate (\\ud800-\\udfff), which is not text"


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is too large a number")
    return value


def refusal_text(exc: ValidationError) -> str:
    """The first MAX_REASONS errors, each as "messages.3: content: why" (the row first)."""
    errors = exc.errors(include_url=False, include_input=False)
    parts = [f"{_where(error['loc'])}{error_text(error)}" for error in errors[:MAX_REASONS]]
    if len(errors) > MAX_REASONS:
        parts.append(f"and {len(errors) - MAX_REASONS:,} more")
    return "; ".join(parts)


def _where(loc: Sequence[int | str]) -> str:
    """`("runs", 0, "model_calls", 1, "step")` as "runs.0: model_calls.1.step: "."""
    cut = next((at + 1 for at, part in enumerate(loc) if isinstance(part, int)), 0)
    row, field = ".".join(map(str, loc[:cut])), ".".join(map(str, loc[cut:]))
    return "".join(f"{part}: " for part in (row, field) if part)
