"""Why an agent, a version or a conversation from one was not made."""

from __future__ import annotations


class AgentRefused(Exception):
    """Nothing was stored. The text says why, in one line for the user."""
