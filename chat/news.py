"""News in the owner's sidebar: a conversation whose run ended (completed, failed, cancelled or
interrupted) after its owner last opened it (`Conversation.seen_at`) is marked until they open
it again.

The rule is read from the rows, never stored: a run's `finished_at` against the conversation's
`seen_at`. A conversation never opened since `seen_at` came (older data, one made from a
terminal) has no news: nothing would tell a reader which of its replies they missed. Live, the
end of a run marks the line on the owner's open pages (`chat.waiting.tell_owner`), and the page
that shows the conversation tells the server it was seen (`seen`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Exists, OuterRef, Q
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from chat import access
from chat.models import Conversation, Run, RunStatus

ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.INTERRUPTED)
"""The ends of a run its owner may have missed (waiting for them is the waiting mark's)."""
TITLE = "New reply"
MARK = '<span class="news-mark" title="{}"><span class="visually-hidden">{}: </span></span>'


def mark(news: bool) -> SafeString:
    """A line's news mark (a dot; its name read before the title), or nothing."""
    return format_html(MARK, TITLE, TITLE) if news else SafeString("")


def has_news() -> Exists:
    """Whether the conversation of the outer query has a run that ended since its owner last
    opened it (an annotation: `Conversation.objects.annotate(news=has_news())`)."""
    ended = Run.objects.filter(
        conversation=OuterRef("pk"), status__in=ENDED, finished_at__gt=OuterRef("seen_at")
    )
    return Exists(ended)


def is_waiting() -> Exists:
    """Whether a run of the conversation of the outer query waits for its owner's decision."""
    return Exists(Run.objects.filter(conversation=OuterRef("pk"), status=RunStatus.REQUIRES_ACTION))


@dataclass(frozen=True)
class Marks:
    """The marked lines of a list: those that wait for their owner, those with news."""

    waits: set[int] = field(default_factory=set)
    news: set[int] = field(default_factory=set)


def marks(user: Any, shown: Iterable[Any]) -> Marks:
    """The marks of those `shown` (conversations, or search hits of them) that are the reader's
    own: one query bounded by what the list shows, none for an empty list."""
    pks = [getattr(item, "conversation", item).pk for item in shown]
    if not pks:
        return Marks()
    mine = access.conversations(user, access.Action.DECIDE).filter(pk__in=pks)
    rows = (
        mine.annotate(waits=is_waiting(), news=has_news())
        .filter(Q(waits=True) | Q(news=True))
        .order_by()
        .values_list("pk", "waits", "news")
    )
    found = Marks()
    for pk, waits, news in rows:
        if waits:
            found.waits.add(pk)
        if news:
            found.news.add(pk)
    return found


def news_of(conversation: Conversation) -> bool:
    """Whether this one conversation has news for its owner (one query)."""
    return Conversation.objects.filter(pk=conversation.pk).filter(has_news()).exists()


def seen(user: Any, conversation: Conversation) -> None:
    """Its owner has it in front of them: what ended so far is no longer news. Written only
    when that changes something (never seen, or news), so a page view is not a write; not a
    save: `updated_at` (the list's order) stays."""
    if access.may(user, access.Action.DECIDE, conversation):
        now = timezone.now()
        unseen = Q(seen_at__isnull=True) | Q(has_news())
        if Conversation.objects.filter(unseen, pk=conversation.pk).update(seen_at=now):
            conversation.seen_at = now


@login_required
@require_POST
def conversation_seen(request: HttpRequest, pk: int) -> HttpResponse:
    """The page that shows the conversation saw a run end there (while it was in front of its
    reader): its line keeps no news mark. Nothing to say back."""
    seen(request.user, access.conversation(request.user, access.Action.DECIDE, pk))
    return HttpResponse(status=204)
