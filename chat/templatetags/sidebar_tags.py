"""Template tags of the sidebar's lists (`chat.sidebar`)."""

from __future__ import annotations

from collections.abc import Container
from urllib.parse import urlencode

from django import template
from django.db.models import QuerySet
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from chat import sidebar, waiting
from chat.models import Conversation

register = template.Library()

LINK = '<li{}><a id="conversation-link-{}" href="{}"{}>{}{}</a></li>'
CURRENT_ITEM = SafeString(' class="current"')
CURRENT_LINK = SafeString(' aria-current="page"')


@register.filter
def first_page(conversations: QuerySet[Conversation]) -> sidebar.Page:
    """The latest page of a list: whoever renders the sidebar hands it all the reader's
    conversations (a lazy query), and it shows the first page only."""
    return sidebar.page(conversations.only(*sidebar.LINK_FIELDS))


@register.simple_tag
def more_url(part: str, shown: sidebar.Page, current: object = None) -> str:
    """Where the page after `shown` of the list `part` comes from, the page's conversation
    (`current`) marked in it."""
    query: dict[str, object] = {"after": shown.next}
    if part == sidebar.MINE:
        query["group"] = shown.last_group
    if current:
        query["current"] = current
    return f"{reverse('chat:sidebar_more', args=[part])}?{urlencode(query)}"


@register.simple_tag
def conversation_link(item: Conversation, current: object, waits: Container[int]) -> SafeString:
    """A conversation's line in the list, marked when it is the page's (`current`) and when it
    waits for its owner. Built here, not from a template: a page has fifty, and a template's
    cost per line was most of the sidebar's time."""
    here = item.pk == current
    return format_html(
        LINK,
        CURRENT_ITEM if here else "",
        item.pk,
        reverse("chat:conversation_detail", args=[item.pk]),
        CURRENT_LINK if here else "",
        waiting.mark(item.pk, item.pk in waits),
        item,
    )
