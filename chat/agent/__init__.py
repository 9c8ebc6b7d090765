"""The pure agent core: no Django imports, unit-testable without a database."""

from .contracts import AgentParameters, DebugRunRequest
from .messages import Attachment, ChatMessage, ToolCall
from .tools import EventAgent, ToolDefinition, ToolRegistry, default_registry, humanize

__all__ = [
    "AgentParameters",
    "Attachment",
    "ChatMessage",
    "DebugRunRequest",
    "EventAgent",
    "ToolCall",
    "ToolDefinition",
    "ToolRegistry",
    "default_registry",
    "humanize",
]
