"""The sidebar's lists a page at a time: the reader's own conversations by date and those the
team shares with them, the latest PAGE of each on every page, the next PAGE as the list
scrolls (the view below).

Pages follow a cursor on (updated_at, id), never an offset: a page deep in a long history costs
what the first one does, and a conversation that moves to the top meanwhile neither shows twice
nor pushes another out of the list.

The reader's own list leaves out what is shown elsewhere or not at all: the pinned ones (a
group of their own on top, `pinned`), the archived ones (a list of their own, ARCHIVED) and
those that have not begun (a conversation comes into the list with its first message).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from chat import access
from chat.models import Conversation
from chat.search import GROUPS, by_date, date_group, searched

PAGE = 50
"""Conversations a page of the sidebar shows: a screen or two, whatever the history's size."""
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
CURSOR = re.compile(r"(-?[0-9]{1,18})_([0-9]{1,18})")
BAD_CURSOR = "This place in the conversation list is not valid: reload the page to start again."
LINK_FIELDS = ("title", "updated_at")
"""What a list's link shows and is sorted by: rows without their settings, which a page of links
would decode for nothing."""
PINS = 30
"""Pinned conversations the list shows on top, latest pin first (more are pinned in vain)."""
MINE, SHARED, ARCHIVED = "mine", "shared", "archived"
TEMPLATES = {
    MINE: "chat/sidebar.html#conversation-page",
    SHARED: "chat/sidebar.html#shared-page",
    ARCHIVED: "chat/archived.html#archived-page",
}
"""The part of the sidebar each list's next page is (for htmx to add to the list)."""
PAGES = {ARCHIVED: "chat/archived.html"}
"""A list's page of its own (without script), when it is not chat/conversations.html."""


@dataclass(frozen=True)
class Cursor:
    """A place in a list, most recent first: the (updated_at, id) of the conversation before it."""

    updated_at: datetime
    pk: int

    @classmethod
    def of(cls, conversation: Conversation) -> Cursor:
        return cls(conversation.updated_at, conversation.pk)

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """The cursor that `str()` wrote (microseconds since 1970, an underscore, the id);
        ValueError for any other text."""
        match = CURSOR.fullmatch(text)
        if match is None:
            raise ValueError(text)
        try:
            moment = EPOCH + timedelta(microseconds=int(match[1]))
        except OverflowError as exc:
            raise ValueError(text) from exc
        return cls(moment, int(match[2]))

    def __str__(self) -> str:
        return f"{(self.updated_at - EPOCH) // timedelta(microseconds=1)}_{self.pk}"

    def older(self) -> Q:
        """The conversations that come after this place: updated before, or at the same moment
        with a smaller id (the tie-break the list is ordered by)."""
        return Q(updated_at__lt=self.updated_at) | Q(updated_at=self.updated_at, pk__lt=self.pk)


@dataclass(frozen=True)
class Group:
    """A date group's conversations on one page. `continued`: the page before ended in this
    group, so the list adds these under its heading instead of repeating it."""

    label: str
    conversations: list[Conversation]
    continued: bool

    @property
    def number(self) -> int:
        """Its place among the groups, from 1: the same on every page, so its ids are unique."""
        return GROUPS.index(self.label) + 1


@dataclass(frozen=True)
class Page:
    """One page of a list: its conversations, most recent first, where it starts (`after`,
    None for the first page), where the next one starts (None at the end) and the date group
    the list shown so far ends in (`continues`, a label of GROUPS; "" for the first page)."""

    conversations: list[Conversation]
    after: Cursor | None = None
    next: Cursor | None = None
    continues: str = ""

    @cached_property
    def groups(self) -> list[Group]:
        """Its conversations by date (`chat.search.by_date`), the first group marked continued
        when the list shown so far ends in it."""
        return [
            Group(group.label, group.conversations, group.label == self.continues)
            for group in by_date(self.conversations)
        ]

    @property
    def last_group(self) -> int:
        """The number of the group this page ends in (0 for an empty page)."""
        groups = self.groups
        return groups[-1].number if groups else 0


def page(
    conversations: QuerySet[Conversation],
    after: Cursor | None = None,
    *,
    continues: str = "",
    size: int = PAGE,
) -> Page:
    """The `size` conversations after `after` (from the top without it), most recent first: one
    query of at most size + 1 rows (the last one says whether a next page exists).

    `continues` is the group the list shown so far ends in; by default the group of the cursor's
    date today. The list says which it drew: a list drawn yesterday ends in a group whose label
    has changed since, and the next page must still find it."""
    found = conversations.order_by("-updated_at", "-pk")
    if after is not None:
        found = found.filter(after.older())
        continues = continues or date_group(
            timezone.localdate(after.updated_at), timezone.localdate()
        )
    rows = list(found[: size + 1])
    shown = rows[:size]
    return Page(shown, after, Cursor.of(shown[-1]) if len(rows) > size else None, continues)


def group_label(number: str) -> str:
    """The label of the group numbered `number` (`Group.number`), "" for none; ValueError for
    a number that names no group."""
    if not number:
        return ""
    labels = {str(place): label for place, label in enumerate(GROUPS, start=1)}
    if number not in labels:
        raise ValueError(number)
    return labels[number]


def listed(user: Any, part: str) -> QuerySet[Conversation]:
    """The conversations of one of the sidebar's lists: the user's own by date (neither pinned
    nor archived), the archived ones, or those the team shares with them (with their owners,
    whom the list names)."""
    if part == SHARED:
        # `shared=True` is implied by the rule; said here too, an index of the shared
        # conversations can serve the list without reading everyone's.
        shared = Conversation.objects.chats().begun().filter(shared=True)
        shared = shared.select_related("owner")
        owner = f"owner__{get_user_model().USERNAME_FIELD}"
        return access.shared_with(user, shared).only(*LINK_FIELDS, owner)
    if part == ARCHIVED:
        return searched(user, archived=True).only(*LINK_FIELDS)
    return searched(user).filter(pinned_at__isnull=True).only(*LINK_FIELDS)


def pinned(user: Any) -> list[Conversation]:
    """The user's pinned conversations, latest pin first, at most PINS: one query."""
    shown = searched(user).filter(pinned_at__isnull=False)
    return list(shown.only(*LINK_FIELDS, "pinned_at").order_by("-pinned_at", "-pk")[:PINS])


@login_required
@require_GET
def more(request: HttpRequest, part: str) -> HttpResponse:
    """The next page of a sidebar list (`mine`, `shared` or `archived`) after the cursor
    `after`: the items htmx adds to the list, or, for a browser without script, a page of their
    own. `current` is the conversation of the page the sidebar is on, marked as such when it
    comes."""
    if part not in TEMPLATES:
        raise Http404("No such list.")
    try:
        after = Cursor.parse(request.GET["after"]) if "after" in request.GET else None
        continues = group_label(request.GET.get("group", ""))
    except ValueError:
        return HttpResponseBadRequest(BAD_CURSOR, content_type="text/plain; charset=utf-8")
    current = request.GET.get("current", "")
    context = {
        "page": page(listed(request.user, part), after, continues=continues),
        "part": part,
        "current": int(current) if current.isdecimal() else None,
    }
    htmx = request.headers.get("HX-Request") == "true"
    if htmx:
        return render(request, TEMPLATES[part], context)
    return render(request, PAGES.get(part, "chat/conversations.html"), context)
