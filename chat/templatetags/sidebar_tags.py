"""Template tags of the sidebar's lists (`chat.sidebar`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

from django import template
from django.db.models import QuerySet
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from chat import news, search, sidebar, waiting
from chat.models import Conversation

register = template.Library()

LINK = '<li{}><a id="conversation-link-{}" href="{}"{}>{}</a>{}</li>'
"""A line: its link, and (in the archived list alone) its menu. The list's own lines carry no
menu: the page has one, which its script puts under the line asked for (static/js/list.js),
so that a line costs what it shows; without script, a conversation's page has its actions."""
MENU = (
    '<details class="line-menu"><summary aria-label="Actions: {}">{}</summary>'
    '<div class="line-actions">{}</div></details>'
)
ARCHIVED_ACTIONS = SafeString(
    '<button form="line-actions" name="unarchive" value="{0}">Unarchive</button>'
    '<button form="line-actions" name="delete" value="{0}">Delete</button>'
)
"""An archived line's buttons, `{0}` standing for its conversation's id: buttons of the page's
one `line-actions` form (its CSRF token), so that they work without script too
(`chat.list_actions`)."""
MENU_ICON = SafeString('<svg class="icon" aria-hidden="true"><use href="#icon-line-menu"/></svg>')
"""The menu's icon: a symbol the page defines once (templates/chat/sidebar.html)."""
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


@register.simple_tag(takes_context=True)
def line_marks(
    context: template.Context, page: sidebar.Page | Iterable[Any], pinned: Iterable[Any] = ()
) -> news.Marks:
    """The marks (waiting, news) of a list's lines: one query for the page, with the pinned
    lines on the first page of the list (`pinned`)."""
    if isinstance(page, sidebar.Page):
        shown: list[Any] = [*(pinned if page.after is None else ()), *page.conversations]
    else:
        shown = list(page)
    return news.marks(context.get("user"), shown)


@register.simple_tag
def conversation_link(
    item: Conversation, current: object, marks: news.Marks, kind: str = sidebar.MINE
) -> SafeString:
    """A conversation's line in the list `kind`, marked when it is the page's (`current`), when
    it waits for its owner and when it has news for them; an archived line has its menu. Built
    here, not from a template: a page has fifty, and a template's cost per line was most of
    the sidebar's time."""
    here = item.pk == current
    pk = item.pk
    menu = ""
    if kind == sidebar.ARCHIVED:
        menu = format_html(MENU, item, MENU_ICON, SafeString(ARCHIVED_ACTIONS.format(pk)))
    return format_html(
        LINK,
        CURRENT_ITEM if here else "",
        pk,
        reverse("chat:conversation_detail", args=[pk]),
        CURRENT_LINK if here else "",
        waiting.inside(item, waits=pk in marks.waits, news=pk in marks.news),
        menu,
    )


@register.simple_tag
def hit_marks(hit: search.Hit, marks: news.Marks) -> SafeString:
    """A search hit's marks, as its line in the list has them."""
    pk = hit.conversation.pk
    return waiting.marks(waits=pk in marks.waits, news=pk in marks.news)
