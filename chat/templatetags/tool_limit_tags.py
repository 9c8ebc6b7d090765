"""The settings' warning when the chosen tools are more than a request may carry."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from django import template

from chat.tool_choices import ToolGroup, limit_warning

register = template.Library()


@register.filter
def tool_limit_warning(groups: Sequence[ToolGroup], chosen: Collection[str] | None) -> str:
    """`groups|tool_limit_warning:chosen`: the warning for the choices as the form holds them
    (those just submitted, or those stored)."""
    return limit_warning(groups, chosen or ())
