"""Template tags of annotations: what a reply, a tool call and its pill show of them."""

from __future__ import annotations

from typing import Any

from django import template

from chat.evals.annotations import Judgements, offered_tools
from chat.models import Annotation, ToolCall
from chat.turns import Turn

register = template.Library()


@register.simple_tag(takes_context=True)
def reply_judgements(context: template.Context, turn: Turn) -> Judgements:
    """A finished reply's annotations, for the reader (nobody in a frame for every socket)."""
    assert turn.run is not None
    return Judgements.of(turn.run, None, turn.annotations, context.get("user"))


@register.simple_tag
def pill_judgements(call: ToolCall, turn: Turn) -> Judgements:
    """A tool call's annotations among its turn's, for the marker on its pill."""
    assert turn.run is not None
    return Judgements.of(turn.run, call, turn.annotations, None)


@register.simple_tag(takes_context=True)
def call_judgements(context: template.Context, call: ToolCall) -> Judgements:
    """A tool call's annotations and the tools offered with it, for its details panel."""
    annotations: Any = Annotation.objects.filter(tool_call=call).select_related("author")
    judged = Judgements.of(call.run, call, annotations, context.get("user"))
    judged.offered = offered_tools(call)
    return judged
