"""Template tags of the sidebar's lists (`chat.sidebar`)."""

from __future__ import annotations

from urllib.parse import urlencode

from django import template
from django.db.models import QuerySet
from django.urls import reverse

from chat import sidebar
from chat.models import Conversation

register = template.Library()


@register.filter
def first_page(conversations: QuerySet[Conversation]) -> sidebar.Page:
    """The latest page of a list: whoever renders the sidebar hands it all the reader's
    conversations (a lazy query), and it shows the first page only."""
    return sidebar.page(conversations)


@register.simple_tag
def more_url(part: str, shown: sidebar.Page, current: int | None = None) -> str:
    """Where the page after `shown` of the list `part` comes from, the page's conversation
    (`current`) marked in it."""
    query: dict[str, object] = {"after": shown.next}
    if part == sidebar.MINE:
        query["group"] = shown.last_group
    if current:
        query["current"] = current
    return f"{reverse('chat:sidebar_more', args=[part])}?{urlencode(query)}"
