"""Transcripts: stored messages as provider-facing values and back, and what is made of them.

- `rows`: Message rows <-> ChatMessage values; appends and strict-history repair.
- `records`: the JSON Lines record formats (openai, full).
- `messages`: the one reader of a message in the OpenAI shape (transcript and case lines).
- `limits`: the bounded gate every stored JSON value passes; what an imported line may hold.
- `export` / `imports`: conversations to records and back.
- `forks`: a new conversation from another's history, optionally with an edited tool result.
- `versions`: edit and resend, regenerate, retry: archived suffixes of the active path.
"""

from .rows import (
    append_messages,
    create_as_recorded,
    load_history,
    message_fields,
    next_index,
    repair_conversation,
    to_chat_message,
    to_chat_messages,
    tool_reply,
    validate_conversation,
)

__all__ = [
    "append_messages",
    "create_as_recorded",
    "load_history",
    "message_fields",
    "next_index",
    "repair_conversation",
    "to_chat_message",
    "to_chat_messages",
    "tool_reply",
    "validate_conversation",
]
