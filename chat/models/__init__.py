"""What a conversation with an agent leaves behind: the transcript and every call it made."""

from chat.agent.decisions import NO_TOOL

from .agents import (
    Agent,
    AgentChoice,
    AgentQuerySet,
    AgentVersion,
    Configuration,
    ImmutableVersion,
    Publication,
    Visibility,
)
from .annotations import (
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
    "Agent",
    "AgentChoice",
    "AgentQuerySet",
    "AgentVersion",
    "Annotation",
    "AnnotationQuerySet",
    "Case",
    "CaseSet",
    "CaseSource",
    "Comparison",
    "Configuration",
    "Conversation",
    "ConversationQuerySet",
    "EvalResult",
    "EvalRun",
    "EvalStatus",
    "HistoryRepair",
    "ImmutableVersion",
    "McpServer",
    "McpTool",
    "Message",
    "MessageQuerySet",
    "ModelCall",
    "ProviderProfile",
    "Publication",
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
    "Visibility",
    "expected_call",
    "expected_field",
    "title_from",
]
