"""Template tags of tool calls that wait for a person: a reply's waiting calls and a sidebar
line's mark (which lines are marked is `chat.news.marks`)."""

from __future__ import annotations

from collections.abc import Iterable

from django import template
from django.utils.safestring import SafeString

from chat import waiting
from chat.turns import Turn

register = template.Library()


@register.filter(name="waiting")
def waiting_filter(turn: Turn) -> waiting.Waiting | None:
    """The turn's waiting calls as its reply shows them; None when its run does not wait."""
    return waiting.waiting(turn)


@register.simple_tag
def waiting_mark(pk: int, waiting_ids: Iterable[int] = ()) -> SafeString:
    """A conversation's sidebar mark: shown when `pk` is one of `waiting_ids`."""
    return waiting.mark(pk in waiting_ids)
