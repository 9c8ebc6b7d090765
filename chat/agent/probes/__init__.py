"""What an OpenAI-compatible endpoint actually does, found by a few small requests.

The requests go through OpenAICompatibleChatClient, as runs do, so the report tells what the lab
will meet. Some facts never reach the client's StreamItems (which field carried the reasoning,
whether the answer was SSE at all), so the HTTP transport keeps a copy of each raw answer.
"""

from .probe import check_provider
from .report import FOREIGN_ID, TOOL_NAME, Report, Turn, profile_fields, summary
from .terminal import describe

__all__ = [
    "FOREIGN_ID",
    "TOOL_NAME",
    "Report",
    "Turn",
    "check_provider",
    "describe",
    "profile_fields",
    "summary",
]
