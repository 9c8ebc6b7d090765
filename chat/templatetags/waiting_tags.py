"""Template tags of tool calls that wait for a person: a reply's waiting calls, and which of the
reader's conversations wait for them (the sidebar's marks)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django import template
from django.utils.safestring import SafeString

from chat import access, waiting
from chat.models import RunStatus
from chat.turns import Turn

register = template.Library()


@register.filter(name="waiting")
def waiting_filter(turn: Turn) -> waiting.Waiting | None:
    """The turn's waiting calls as its reply shows them; None when its run does not wait."""
    return waiting.waiting(turn)


@register.simple_tag(takes_context=True)
def waiting_conversations(context: template.Context, shown: Iterable[Any]) -> set[int]:
    """The ids of those `shown` (conversations, or search hits of them) that are the reader's
    own and wait for their decision: one query, bounded by what the list shows, none for an
    empty list."""
    pks = [getattr(item, "conversation", item).pk for item in shown]
    if not pks:
        return set()
    mine = access.conversations(context.get("user"), access.Action.DECIDE)
    waits = mine.filter(pk__in=pks, runs__status=RunStatus.REQUIRES_ACTION)
    return set(waits.order_by().values_list("pk", flat=True))


@register.simple_tag
def waiting_mark(pk: int, waiting_ids: Iterable[int] = ()) -> SafeString:
    """A conversation's sidebar mark: shown when `pk` is one of `waiting_ids`."""
    return waiting.mark(pk, pk in waiting_ids)
