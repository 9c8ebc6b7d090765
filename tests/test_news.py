"""News in the owner's sidebar (chat/news.py): a run that ended since they last opened its
conversation marks its line, on every page they have open and on the next page drawn, until
they open it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from chat import news
from chat.models import Conversation, Run, RunStatus
from chat.testing import factories as make
from chat.testing.sockets import DONE, connect, frames_until, send
from tests.test_sidebar_pages import made

NEWS = '<span class="news-mark" title="New reply"><span class="visually-hidden">New reply: </span>'


def ended(conversation: Conversation, status: str, *, minutes: int) -> Run:
    """A run of `conversation` that ended `minutes` after the conversation was last seen."""
    seen = conversation.seen_at or timezone.now()
    return Run.objects.create(
        conversation=conversation, status=status, finished_at=seen + timedelta(minutes=minutes)
    )


def line(html: str, conversation: Conversation) -> str:
    start = html.index(f'id="conversation-link-{conversation.pk}"')
    return html[start : html.index("</a>", start)]


@pytest.mark.django_db
def test_a_run_that_ended_since_the_owner_looked_marks_the_line(
    client_in: Client, user: Any
) -> None:
    rows = made(user, 6, seen_at=timezone.now())
    for row in rows[:4]:
        ended(row, [*news.ENDED][rows.index(row)], minutes=1)
    ended(rows[4], RunStatus.COMPLETED, minutes=-1)  # it ended before they looked
    Conversation.objects.filter(pk=rows[5].pk).update(seen_at=None)  # never opened since
    ended(rows[5], RunStatus.COMPLETED, minutes=1)

    html = client_in.get(reverse("chat:evals:index")).content.decode()

    assert [NEWS in line(html, row) for row in rows] == [True] * 4 + [False, False]


@pytest.mark.django_db
def test_the_marks_of_a_page_are_one_query_with_the_waiting_ones(user: Any) -> None:
    rows = made(user, 3, seen_at=timezone.now())
    ended(rows[0], RunStatus.FAILED, minutes=1)
    Run.objects.create(conversation=rows[1], status=RunStatus.REQUIRES_ACTION)

    with CaptureQueriesContext(connection) as queries:
        marks = news.marks(user, rows)

    assert (marks.news, marks.waits) == ({rows[0].pk}, {rows[1].pk})
    assert len(queries) == 1
    assert news.marks(user, []) == news.Marks()


@pytest.mark.django_db
def test_opening_the_conversation_clears_its_mark_and_keeps_its_place(
    client_in: Client, user: Any
) -> None:
    [row] = made(user, 1, seen_at=timezone.now() - timedelta(hours=1))
    ended(row, RunStatus.COMPLETED, minutes=5)
    before = Conversation.objects.get(pk=row.pk).updated_at

    other = client_in.get(reverse("chat:evals:index")).content.decode()
    opened = client_in.get(reverse("chat:conversation_detail", args=[row.pk])).content.decode()
    after = client_in.get(reverse("chat:evals:index")).content.decode()

    assert NEWS in line(other, row)
    assert NEWS not in line(opened, row) and NEWS not in line(after, row)
    assert Conversation.objects.get(pk=row.pk).updated_at == before


@pytest.mark.django_db
def test_the_page_showing_it_says_it_was_seen_and_only_its_owner_may(
    client_in: Client, user: Any
) -> None:
    [row] = made(user, 1)
    theirs = make.conversation(make.user("bo"), "Shared")
    Conversation.objects.filter(pk=theirs.pk).update(shared=True)

    mine = client_in.post(reverse("chat:conversation_seen", args=[row.pk]))
    reader = client_in.post(reverse("chat:conversation_seen", args=[theirs.pk]))

    assert mine.status_code == 204 and Conversation.objects.get(pk=row.pk).seen_at is not None
    assert reader.status_code == 404
    assert Conversation.objects.get(pk=theirs.pk).seen_at is None
    assert client_in.get(reverse("chat:conversation_seen", args=[row.pk])).status_code == 405


@pytest.mark.django_db(transaction=True)
async def test_a_run_that_ends_marks_the_line_on_the_owners_other_pages() -> None:
    owner = await sync(make.user)("ada")
    made_here = await sync(make.conversation)(owner, "Trip")
    elsewhere = await sync(make.conversation)(owner, "Elsewhere")
    await Conversation.objects.filter(pk=made_here.pk).aupdate(seen_at=timezone.now())
    ws, other = await connect(owner, made_here), await connect(owner, elsewhere)

    await send(ws, "hello")

    here = await frames_until(ws, DONE)
    link = f'<a id="conversation-link-{made_here.pk}" hx-swap-oob="innerHTML">'
    frame = (await frames_until(other, link))[-1]
    assert frame == f"{link}{NEWS}</span>Trip</a>"
    # The page showing it is told too (its script then says it was seen).
    if not any(link in each for each in here):
        here += await frames_until(ws, link)
    assert frame in here
    for socket in (ws, other):
        await socket.disconnect()


@pytest.mark.django_db
def test_a_visit_moves_seen_at_only_when_it_changes_something(client_in: Client, user: Any) -> None:
    [row] = made(user, 1)
    page = reverse("chat:conversation_detail", args=[row.pk])
    client_in.get(page)
    first = Conversation.objects.get(pk=row.pk).seen_at

    client_in.get(page)

    assert first is not None and Conversation.objects.get(pk=row.pk).seen_at == first
    ended(Conversation.objects.get(pk=row.pk), RunStatus.COMPLETED, minutes=1)
    client_in.get(page)
    assert Conversation.objects.get(pk=row.pk).seen_at > first
