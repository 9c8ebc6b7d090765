"""Template filters of approvals: what a tool call's record says of its decision."""

from __future__ import annotations

from django import template

from chat import approval_record
from chat.models import ToolCall

register = template.Library()


@register.filter
def approval(call: ToolCall | None) -> approval_record.Record | None:
    """The call's approval record (`chat.approval_record.record`); None for no call."""
    return None if call is None else approval_record.record(call)
