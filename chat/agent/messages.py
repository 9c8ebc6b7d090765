"""The OpenAI Chat Completions message shapes, as pure values."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")

EmptyContent = Literal["empty", "null", "omit"]
"""How a tool-call-only assistant message carries its content: `""`, `null`, or no key.

Providers disagree: some reject `null`, others reject `""`; the default `""` is the one most
accept.
"""


class ToolCall(BaseModel):
    """A call the model asked for; `arguments` is the raw JSON string exactly as sent."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str = ""

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    @classmethod
    def from_openai(cls, data: dict[str, Any]) -> ToolCall:
        function = data.get("function") or {}
        arguments = function.get("arguments")
        if isinstance(arguments, dict | list):
            arguments = json.dumps(arguments)
        return cls(
            id=str(data.get("id") or ""),
            name=str(function.get("name") or ""),
            arguments=str(arguments or ""),
        )


AttachmentKind = Literal["image", "text", "pdf"]
MAX_ATTACHMENTS = 10
"""The most files one message carries."""


class Attachment(BaseModel):
    """A file sent with a user message, named by the sha256 of its bytes.

    `content` is what the model reads of it, filled in just before a request: an image's data
    URL, a text file's text, a PDF's extracted text. Stored values leave it empty.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    content_type: str
    size: int
    sha256: str
    kind: AttachmentKind
    pages: int = 0
    content: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """The content part the model gets: an `image_url` part, or a `text` part that names
        the file before its text."""
        if self.kind == "image":
            url = self.content or f"attachment:{self.sha256}"
            return {"type": "image_url", "image_url": {"url": url}}
        if self.content is None:
            return {"type": "text", "text": f"[{self.heading()}: not loaded]"}
        return {"type": "text", "text": f"{self.heading()}:\n\n{self.content}"}

    def heading(self) -> str:
        if self.kind == "pdf":
            pages = "1 page" if self.pages == 1 else f"{self.pages:,} pages"
            return f"Attached file {self.name} (PDF, {pages}, as text)"
        return f"Attached file {self.name} ({self.content_type})"

    def stored(self) -> Attachment:
        """The value without its loaded content, as a row keeps it."""
        return self.model_copy(update={"content": None}) if self.content is not None else self


class ChatMessage(BaseModel):
    """One provider-facing message. `reasoning` is kept for display, never sent back.

    A user message's `attachments` go after its text as content parts (the OpenAI shape for
    images and files); without any, `content` is a plain string.
    """

    model_config = ConfigDict(frozen=True)

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    reasoning: str | None = None
    attachments: tuple[Attachment, ...] = ()

    @model_validator(mode="after")
    def _check_role_fields(self) -> ChatMessage:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages carry tool_calls, not {self.role!r}")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id it answers")
        if self.role != "tool" and self.tool_call_id is not None:
            raise ValueError(f"only tool messages carry a tool_call_id, not {self.role!r}")
        if self.attachments and self.role != "user":
            raise ValueError(f"only user messages carry attachments, not {self.role!r}")
        if len(self.attachments) > MAX_ATTACHMENTS:
            raise ValueError(
                f"a message carries at most {MAX_ATTACHMENTS} attachments, "
                f"not {len(self.attachments)}"
            )
        return self

    def to_openai(self, *, empty_content: EmptyContent = "empty") -> dict[str, Any]:
        """Serialise to the request shape: no internal fields, never `tool_calls: []`."""
        data: dict[str, Any] = {"role": self.role}
        if self.tool_calls:
            if self.content:
                data["content"] = self.content
            elif empty_content == "empty":
                data["content"] = ""
            elif empty_content == "null":
                data["content"] = None
            data["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        elif self.attachments:
            text = [{"type": "text", "text": self.content}] if self.content else []
            data["content"] = text + [attachment.to_openai() for attachment in self.attachments]
        else:
            data["content"] = self.content or ""
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        return data

    @classmethod
    def from_openai(cls, data: dict[str, Any]) -> ChatMessage:
        """Read a message in the OpenAI shape; raises ValueError on an invalid one."""
        raw_calls = data.get("tool_calls") or []
        content = data.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        return cls(
            role=data.get("role"),
            content=content,
            tool_calls=tuple(ToolCall.from_openai(call) for call in raw_calls),
            tool_call_id=data.get("tool_call_id"),
            reasoning=data.get("reasoning_content") or data.get("reasoning"),
        )
