"""What a conversation with an agent leaves behind: the transcript and every call it made."""

from .annotations import (
    NO_TOOL,
    Annotation,
    AnnotationQuerySet,
    Verdict,
    expected_call,
    expected_field,
)
from .conversations import (
    Conversation,
    ConversationQuerySet,
    HistoryRepair,
    Message,
    MessageQuerySet,
    Version,
    title_from,
)
from .mcp import McpServer, McpTool
from .providers import ProviderProfile
from .runs import (
    ModelCall,
    Run,
    RunQuerySet,
    RunStatus,
    ToolCall,
    ToolCallQuerySet,
    ToolCallStatus,
    ToolFailure,
)

__all__ = [
    "NO_TOOL",
    "Annotation",
    "AnnotationQuerySet",
    "Conversation",
    "ConversationQuerySet",
    "HistoryRepair",
    "McpServer",
    "McpTool",
    "Message",
    "MessageQuerySet",
    "ModelCall",
    "ProviderProfile",
    "Run",
    "RunQuerySet",
    "RunStatus",
    "ToolCall",
    "ToolCallQuerySet",
    "ToolCallStatus",
    "ToolFailure",
    "Verdict",
    "Version",
    "expected_call",
    "expected_field",
    "title_from",
]
