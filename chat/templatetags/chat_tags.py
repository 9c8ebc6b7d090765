from __future__ import annotations

from django import template

from chat.agent.tools import humanize

register = template.Library()


@register.filter
def humanize_tool(name: str) -> str:
    """Display name of a tool: `search_cards` -> "Search cards"."""
    return humanize(str(name))
