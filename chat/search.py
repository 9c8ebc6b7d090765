"""Finding conversations: the sidebar's search (its view too) and its date groups. The admin's
search shares the matching rule; the full-text index behind it is `chat.search_index`."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import (
    BooleanField,
    Case,
    ExpressionWrapper,
    F,
    Q,
    QuerySet,
    Value,
    When,
    Window,
)
from django.db.models.functions import Greatest, Lower, RowNumber, StrIndex, Substr
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString
from django.utils.text import smart_split, unescape_string_literal
from django.views.decorators.http import require_GET

from chat import access, search_index
from chat.models import Conversation, Message
from chat.search_index import Term

LIMIT = 50
"""Results a search shows; the reader is told when more match."""
WALK = 300
"""Conversations a search tests one by one, most recent first, before it asks the index for
every match (`_found`)."""
MAX_WORDS = 10
MAX_QUERY_CHARS = 200
SNIPPET_CHARS = 110
"""Characters of message text a result shows, about two lines of the sidebar."""
SNIPPET_BEFORE = 28
"""Of which before the match, so the match is on the first line."""
FETCH_BEFORE, FETCH_CHARS = 120, 480
"""The window of a message's text the database sends: enough around the match for a snippet
after whitespace is collapsed, never the whole of a long message."""
SHOWN_ROLES = (Message.Role.USER, Message.Role.ASSISTANT)
"""The messages whose text the reader sees, and so can look for."""
GROUPS = ("Today", "Yesterday", "Previous 7 days", "Previous 30 days", "Older")


def terms(text: str) -> list[Term]:
    """What a search looks for: its words and quoted phrases, each once, at most MAX_WORDS;
    `time "in  Paris"` -> the word time (a prefix) and the phrase in Paris."""
    found: list[Term] = []
    for bit in smart_split(text[:MAX_QUERY_CHARS]):
        exact = len(bit) > 1 and bit[0] in "\"'" and bit[0] == bit[-1]
        if exact:
            bit = unescape_string_literal(bit)
        term = Term.of(" ".join(bit.split()), exact=exact)
        if term is not None and term.key() not in {other.key() for other in found}:
            found.append(term)
    return found[:MAX_WORDS]


def matching(
    conversations: QuerySet[Conversation], looked_for: Sequence[Term], *, everywhere: bool = False
) -> QuerySet[Conversation]:
    """Those with every term in the title or in a message: each term may be in a different
    message (a conversation is found by what it is about, not by one sentence).

    The sidebar counts the text its reader sees: the user and assistant messages of the active
    path. The admin (`everywhere`) counts every message of every version, with the names of
    the tools it called.
    """
    return conversations.filter(_every_term(looked_for, everywhere=everywhere))


def _every_term(looked_for: Sequence[Term], *, everywhere: bool, each: bool = False) -> Q:
    index = search_index.backend()
    messages = _messages(everywhere)
    condition = Q()
    for term in looked_for:
        found = messages.filter(index.messages([term], everywhere=everywhere, each=each))
        condition &= index.titles(term) | index.containing(found, each=each)
    return condition


def messages_matching(messages: QuerySet[Message], looked_for: Sequence[Term]) -> QuerySet[Message]:
    """Those of `messages` with every term in their text or their tool calls' names."""
    index = search_index.backend()
    for term in looked_for:
        messages = messages.filter(index.messages([term], everywhere=True))
    return messages


def _messages(everywhere: bool) -> QuerySet[Message]:
    """The messages a search reads: all of them, or those the reader sees."""
    if everywhere:
        return Message.objects.all()
    return Message.objects.active().filter(role__in=SHOWN_ROLES)


@dataclass(frozen=True)
class Hit:
    """A conversation a search found: its title and a snippet of its first matching message
    (empty when only the title matches), escaped, each match in <mark>; `message`, that
    message's index when it is on the active path."""

    conversation: Conversation
    title: SafeString
    snippet: SafeString
    message: int | None = None

    @property
    def when(self) -> str:
        """When the conversation was last updated, short, in the server's time zone: the time
        today, the day this year ("3 Mar"), the day and year before ("3 Mar 2025")."""
        return short_date(self.conversation.updated_at)

    @property
    def url(self) -> str:
        """The conversation's page, opened at the matching message when there is one."""
        page = reverse("chat:conversation_detail", args=[self.conversation.pk])
        return page if self.message is None else f"{page}?at={self.message}#message-{self.message}"


@dataclass(frozen=True)
class Results:
    """What a search found, most recent first; `more` when more matched than are shown."""

    query: str
    hits: list[Hit]
    more: bool

    @property
    def summary(self) -> str:
        """What a screen reader announces once the results are in."""
        if not self.hits:
            return f"No conversation matches “{self.query}”."
        if self.more:
            return f"More than {len(self.hits)} conversations match: the most recent are shown."
        n = len(self.hits)
        return f"{n} conversation matches." if n == 1 else f"{n} conversations match."


def search(
    conversations: QuerySet[Conversation],
    query: str,
    *,
    limit: int = LIMIT,
    everywhere: bool = False,
) -> Results:
    """The conversations with every term of `query`, most recent first, at most `limit`.
    `conversations` are those the reader may see (the sidebar searches their own);
    `everywhere` reads them as the admin does (`matching`).

    A few queries whatever the number of conversations or messages: the matches (`found`),
    their rows, then for each its best matching message (the index's rank) with a window of
    its text around the match.
    """
    looked_for = terms(query)
    rows: list[Conversation] = []
    if looked_for:
        pks = found(conversations, looked_for, count=limit + 1, everywhere=everywhere)
        rows = list(conversations.filter(pk__in=pks).order_by("-updated_at", "-id"))
    texts = _windows([row.pk for row in rows[:limit]], looked_for, everywhere=everywhere)
    pattern = _pattern(looked_for)
    hits = []
    for row in rows[:limit]:
        window, start, message = texts.get(row.pk, ("", 1, None))
        hits.append(
            Hit(row, highlight(str(row), pattern), snippet(window, start, pattern), message)
        )
    return Results(" ".join(query[:MAX_QUERY_CHARS].split()), hits, more=len(rows) > limit)


def found(
    conversations: QuerySet[Conversation],
    looked_for: Sequence[Term],
    *,
    count: int,
    everywhere: bool = False,
    walk: int | None = None,
) -> list[int]:
    """The ids of the `count` most recent conversations with every term (`matching`).

    First the `walk` (WALK) most recent are tested one by one: a term common enough to be in `count`
    of them is found without reading its every match in the index. Only when they are not
    enough (and there are more) does the database look up the index's matches, which is
    quick for a rare term.
    """
    walk = walk or WALK
    recent = conversations.order_by("-updated_at", "-id")
    test = ExpressionWrapper(
        _every_term(looked_for, everywhere=everywhere, each=True), output_field=BooleanField()
    )
    walked = list(recent.annotate(hit=test).values_list("pk", "hit")[:walk])
    hits = [pk for pk, hit in walked if hit][:count]
    if len(hits) == count or len(walked) < walk:
        return hits
    return list(
        matching(recent, looked_for, everywhere=everywhere).values_list("pk", flat=True)[:count]
    )


def _windows(
    pks: list[int], looked_for: Sequence[Term], *, everywhere: bool
) -> dict[int, tuple[str, int, int | None]]:
    """Each conversation's best matching message: its text around the first term found, where
    that window starts (from 1), and the message's index when it is on the active path."""
    if not pks or not looked_for:
        return {}
    firsts = [term.tokens[0] for term in looked_for]
    at = Case(
        *(
            When(content__icontains=token, then=StrIndex(Lower("content"), Value(token.lower())))
            for token in firsts
        ),
        default=Value(1),
    )
    best = Window(
        RowNumber(),
        partition_by=F("conversation_id"),
        order_by=[F("score").desc(), F("index").asc()],
    )
    start = Greatest(F("at") - FETCH_BEFORE, Value(1))
    candidates = _messages(everywhere).filter(conversation_id__in=pks)
    ranked = search_index.backend().ranked(candidates, looked_for, everywhere=everywhere)
    rows = (
        ranked.annotate(place=best)
        .filter(place=1)
        .annotate(at=at)
        .annotate(start=start)
        .annotate(window=Substr("content", start, FETCH_CHARS))
        .order_by()
        .values_list("conversation_id", "window", "start", "index", "version_id")
    )
    return {
        pk: (window or "", start, None if version else index)
        for pk, window, start, index, version in rows
    }


def _pattern(looked_for: Sequence[Term]) -> re.Pattern[str] | None:
    if not looked_for:
        return None
    longest_first = sorted(looked_for, key=lambda term: len(term.text), reverse=True)
    return re.compile("|".join(term.pattern() for term in longest_first), re.IGNORECASE)


def highlight(text: str, pattern: re.Pattern[str] | None) -> SafeString:
    """`text` escaped, every match of `pattern` in <mark>."""
    if pattern is None:
        return escape(text)
    parts, last = [], 0
    for match in pattern.finditer(text):
        parts += [html.escape(text[last : match.start()]), "<mark>", html.escape(match.group())]
        parts.append("</mark>")
        last = match.end()
    parts.append(html.escape(text[last:]))
    return SafeString("".join(parts))


def snippet(window: str, start: int, pattern: re.Pattern[str] | None) -> SafeString:
    """About SNIPPET_CHARS of `window` (a message's text from character `start`) on one line,
    cut at spaces around its first match, an ellipsis where text was left out."""
    text = " ".join(window.split())
    if not text:
        return SafeString("")
    match = pattern.search(text) if pattern else None
    at, end_of_match = (match.start(), match.end()) if match else (0, 0)
    begin = 0
    if at > SNIPPET_BEFORE:
        space = text.find(" ", at - SNIPPET_BEFORE, at)
        begin = space + 1 if space >= 0 else at - SNIPPET_BEFORE
    elif start > 1:  # the window starts mid-word
        begin = text.find(" ", 0, at) + 1
    end = max(begin + SNIPPET_CHARS, end_of_match)
    if end < len(text):
        space = text.rfind(" ", end_of_match, end)
        end = space if space > end_of_match else end
    cut_before = begin > 0 or start > 1
    cut_after = end < len(text) or len(window) >= FETCH_CHARS
    return format_html(
        "{}{}{}",
        "…" if cut_before else "",
        highlight(text[begin:end], pattern),
        "…" if cut_after else "",
    )


def short_date(moment: datetime, today: date | None = None) -> str:
    """`moment` in few characters, in the server's time zone: 14:05 today, 3 Mar this year,
    3 Mar 2025 before."""
    local = timezone.localtime(moment)
    today = today or timezone.localdate()
    if local.date() == today:
        return f"{local:%H:%M}"
    day = f"{local.day} {local:%b}"
    return day if local.year == today.year else f"{day} {local.year}"


@dataclass(frozen=True)
class DateGroup:
    """Conversations last updated in one span of days, as the sidebar lists them."""

    label: str
    conversations: list[Conversation]


def date_group(day: date, today: date) -> str:
    """The group of a day: Today, Yesterday, Previous 7 days (2 to 7 days ago), Previous 30
    days (8 to 30) or Older; a day after today (a clock set wrong) counts as today."""
    age = (today - day).days
    if age <= 0:
        return "Today"
    if age == 1:
        return "Yesterday"
    if age <= 7:
        return "Previous 7 days"
    return "Previous 30 days" if age <= 30 else "Older"


def by_date(conversations: Iterable[Conversation], today: date | None = None) -> list[DateGroup]:
    """Conversations, in their order, grouped by the day of their last update in the server's
    time zone; groups without conversations are left out."""
    today = today or timezone.localdate()
    groups: dict[str, list[Conversation]] = {}
    for conversation in conversations:
        label = date_group(timezone.localdate(conversation.updated_at), today)
        groups.setdefault(label, []).append(conversation)
    return [DateGroup(label, groups[label]) for label in GROUPS if label in groups]


def searched(user: Any, *, archived: bool = False) -> QuerySet[Conversation]:
    """What the reader's search reads: their own conversations that have begun
    (`ConversationQuerySet.begun`), those not archived (or, with `archived`, only those)."""
    chats = Conversation.objects.chats().begun()
    mine = access.conversations(user, access.Action.WRITE, chats)
    return mine.filter(archived_at__isnull=not archived)


@login_required
@require_GET
def conversation_search(request: HttpRequest) -> HttpResponse:
    """The sidebar's list: what a search finds, or with no words every conversation by date.
    `current` is the conversation of the page, marked as such in the list. Archived
    conversations are not searched here: the archived list has a search of its own
    (`chat.list_actions.archived`). Without words, the list is the context processor's."""
    query, current = request.GET.get("q", ""), request.GET.get("current", "")
    context = {
        "results": search(searched(request.user), query) if terms(query) else None,
        "current": int(current) if current.isdecimal() else None,
        "searched": True,
    }
    return render(request, "chat/sidebar.html#conversation-list", context)
