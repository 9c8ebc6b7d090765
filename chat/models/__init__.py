"""What a conversation with an agent leaves behind: the transcript and every call it made."""

from .conversations import Conversation, ConversationQuerySet, HistoryRepair, Message, title_from
from .providers import ProviderProfile
from .runs import ModelCall, Run, RunQuerySet, RunStatus, ToolCall, ToolCallQuerySet, ToolCallStatus

__all__ = [
    "Conversation",
    "ConversationQuerySet",
    "HistoryRepair",
    "Message",
    "ModelCall",
    "ProviderProfile",
    "Run",
    "RunQuerySet",
    "RunStatus",
    "ToolCall",
    "ToolCallQuerySet",
    "ToolCallStatus",
    "title_from",
]
