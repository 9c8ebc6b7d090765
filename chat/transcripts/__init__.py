"""Transcripts: stored messages as provider-facing values and back, and what is made of them.

- `rows`: Message rows <-> ChatMessage values; appends and strict-history repair.
- `records`: the JSON Lines record formats (openai, full).
- `limits`: what an imported line may hold (bounds, content parts, folded tool results).
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
