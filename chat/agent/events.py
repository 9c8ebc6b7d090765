"""What a model stream and a run produce, as small immutable values.

`ChatClient.stream()` yields `ModelRequestSent`, text/reasoning deltas, `Usage` and ends with one
`TurnEnd`. `DebugRuntime.run()` passes those through and adds the step, tool and run events
(a tool call's progress among them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .messages import ChatMessage, ToolCall

RawStream = tuple[tuple[float, str], ...]
"""The stream as received: (milliseconds since the request was sent, line) per non-empty line."""

RunStatus = Literal[
    "in_progress", "requires_action", "completed", "failed", "cancelled", "interrupted"
]
"""requires_action: the run waits for a person to decide tool calls (see approvals)."""
ToolCallStatus = Literal["in_progress", "completed", "failed", "cancelled"]


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
        )

    def __sub__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens - other.prompt_tokens,
            self.completion_tokens - other.completion_tokens,
            self.total_tokens - other.total_tokens,
        )


@dataclass(frozen=True, slots=True)
class ModelRequestSent:
    """The provider accepted the request: the exact body sent (no secrets in it), and the sha256
    of the bytes it was sent as (`wire.encode_body`)."""

    body: dict[str, Any]
    status_code: int = 200
    attempts: int = 1
    url: str = ""
    sha256: str = ""


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """A model turn is over: the assembled assistant message and why it stopped.

    `finish_reason` is None when the turn was cut short by an error; the message then holds what
    streamed so far (text and reasoning, never half-received tool calls).
    """

    message: ChatMessage
    finish_reason: str | None
    step: int = 0
    raw: RawStream = field(default=(), compare=False, repr=False)


StreamItem = TextDelta | ReasoningDelta | Usage | ModelRequestSent | TurnEnd


@dataclass(frozen=True, slots=True)
class RunStarted:
    """The run is accepted and its user message stored; always the first event listeners see."""


@dataclass(frozen=True, slots=True)
class StepStarted:
    step: int
    max_steps: int


@dataclass(frozen=True, slots=True)
class ModelCallFailed:
    """A model request failed; `message` is the provider's own words, secrets redacted."""

    step: int
    message: str
    status_code: int | None = None
    request_body: dict[str, Any] | None = None
    attempts: int = 1
    raw: RawStream = field(default=(), compare=False, repr=False)
    request_sha256: str = ""


@dataclass(frozen=True, slots=True)
class PreflightRepaired:
    """The history was not strict-valid before a request; the passes repaired it."""

    step: int
    violations: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The outcome of one tool call; `message` is the tool reply the model will see."""

    tool_call: ToolCall
    content: str
    status: Literal["completed", "failed"]
    error: str | None = None
    duration: float = 0.0
    source: str = ""
    """Where the tool lives when not built in: an MCP server's name."""
    raw: Any = None
    """The result as the tool's source gave it (an MCP CallToolResult as JSON), for the logs."""
    failure: str = ""
    """Of a failed call, why (one of tools.FAILURE_KINDS)."""
    policy: str = ""
    """The tool's policy it ran (or was refused) under: run, ask or never; empty where
    policies do not apply (an evaluation's replay)."""

    @property
    def message(self) -> ChatMessage:
        return ChatMessage(role="tool", content=self.content, tool_call_id=self.tool_call.id)


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    tool_call: ToolCall
    step: int = 0


@dataclass(frozen=True, slots=True)
class ToolCallProgress:
    """A running call said how far it is (an MCP server's progress notification): `progress`
    of `total` when the total is known, and what it is doing now."""

    tool_call_id: str
    progress: float
    total: float | None = None
    message: str | None = None
    step: int = 0


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    result: ToolResult
    step: int = 0


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """A turn's calls whose tools ask first: the run waits for a person's decision on each
    (it then ends `requires_action`; the calls of the turn that need none wait with them)."""

    tool_calls: tuple[ToolCall, ...]
    step: int = 0
    sources: tuple[str, ...] = ()
    """Where each waiting call's tool lives: its MCP server, "" when built in."""


@dataclass(frozen=True, slots=True)
class RunFinished:
    status: RunStatus
    error: str | None = None
    steps: int = 0
    usage: Usage = field(default_factory=Usage)


RunEvent = (
    StreamItem
    | RunStarted
    | StepStarted
    | PreflightRepaired
    | ModelCallFailed
    | ToolCallStarted
    | ToolCallProgress
    | ToolCallFinished
    | ApprovalRequested
    | RunFinished
)
