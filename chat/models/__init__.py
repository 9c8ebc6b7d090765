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
    Purpose,
    Version,
    title_from,
)
from .evals import (
    Case,
    CaseSet,
    CaseSource,
    Comparison,
    EvalResult,
    EvalRun,
    EvalStatus,
    ResultVerdict,
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
    "Case",
    "CaseSet",
    "CaseSource",
    "Comparison",
    "Conversation",
    "ConversationQuerySet",
    "EvalResult",
    "EvalRun",
    "EvalStatus",
    "HistoryRepair",
    "McpServer",
    "McpTool",
    "Message",
    "MessageQuerySet",
    "ModelCall",
    "ProviderProfile",
    "Purpose",
    "ResultVerdict",
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
