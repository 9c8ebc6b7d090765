"""The admin transcript a window at a time (chat/admin/transcript.py): the latest messages,
earlier ones by `?before=`, a link into an old message by `?at=`, staff only, and a page that
costs the same whatever the conversation's length."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.db.models import F
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from chat.models import Conversation, Message
from chat.testing import factories as make
from chat.transcripts import versions
from chat.turns import LONGEST_TURN, WINDOW
from tests.test_conversation_windows import long_conversation, question_from

pytestmark = pytest.mark.django_db
EARLIER = re.compile(r'<a href="\?before=(\d+)#message-(\d+)">Show earlier messages</a>')


def change_url(made: Conversation) -> str:
    return reverse("admin:chat_conversation_change", args=[made.pk])


def active_indexes(html: str) -> list[int]:
    """The active path's messages the page shows, in order."""
    transcript = html[html.index('id="transcript"') :].partition('id="versions"')[0]
    return [int(n) for n in re.findall(r'<article [^>]*id="message-(\d+)"', transcript)]


@pytest.fixture
def long(user: Any) -> Conversation:
    return long_conversation(user, 400)


def test_the_transcript_shows_the_latest_window_and_links_to_the_earlier_ones(
    staff: Client, long: Conversation
) -> None:
    html = staff.get(change_url(long)).content.decode()
    shown = active_indexes(html)
    assert shown == list(range(shown[0], 400)) and len(shown) <= WINDOW
    assert Message.objects.get(conversation=long, index=shown[0]).role == "user"
    assert "Transcript · 400 messages" in html
    assert f"Messages {shown[0]} to 399 of 400." in html

    seen = shown
    while (found := EARLIER.search(html)) is not None:
        before, anchor = int(found.group(1)), int(found.group(2))
        assert anchor == before - 1  # the browser lands where the reader left off
        html = staff.get(f"{change_url(long)}?before={before}").content.decode()
        shown = active_indexes(html)
        assert shown == list(range(shown[0], before))
        assert Message.objects.get(conversation=long, index=shown[0]).role == "user"
        assert f'<a href="?at={before}#message-{before}">Show later messages</a>' in html
        seen = shown + seen
    assert seen == list(range(400))


def test_a_link_into_an_old_message_opens_its_window(staff: Client, long: Conversation) -> None:
    html = staff.get(f"{change_url(long)}?at=77").content.decode()
    shown = active_indexes(html)
    assert 77 in shown and shown[0] <= 77
    link = 'class="chat-permalink" href="?at=77#message-77" title="A link to this message">#77<'
    assert link in html
    assert '<a href="?">Latest messages</a>' in html


def test_archived_versions_of_the_window_come_with_it(staff: Client, long: Conversation) -> None:
    at = question_from(long, 100)
    archived = versions.archive_from(long, at)
    Message.objects.create(conversation=long, index=at, role="user", content="asked again")
    versions.switch(long, at, archived.number)  # the long path again, a short version beside

    latest = staff.get(change_url(long)).content.decode()
    assert 'id="versions"' not in latest and "asked again" not in latest
    there = staff.get(f"{change_url(long)}?at={at}").content.decode()
    assert "version 1 of 2 (active)" in there
    assert f"Version 2 from message {at} · 1 message" in there and "asked again" in there


def test_a_log_without_questions_pages_too(staff: Client, user: Any) -> None:
    """An imported agent log may hold no user message: past LONGEST_TURN, a window is cut where
    it ends rather than growing with the log."""
    made = make.big_conversation(user, messages=LONGEST_TURN + 300, tool_calls=1, runs=4)
    html = staff.get(change_url(made)).content.decode()
    assert active_indexes(html) == list(range(LONGEST_TURN + 300 - WINDOW, LONGEST_TURN + 300))
    found = EARLIER.search(html)
    assert found is not None
    html = staff.get(f"{change_url(made)}?before={found.group(1)}").content.decode()
    assert len(active_indexes(html)) == WINDOW


def test_only_staff_read_it(client: Client, long: Conversation) -> None:
    client.force_login(long.owner)
    response = client.get(f"{change_url(long)}?before=200")
    assert response.status_code == 302 and "/login/" in response["Location"]


def _transcript(client: Client, made: Conversation) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(change_url(made))
    assert response.status_code == 200
    return len(queries), len(response.content)


def test_the_transcript_of_3300_messages_costs_what_one_of_100_does(
    staff: Client, user: Any
) -> None:
    short = long_conversation(user, 100, "short")
    huge = long_conversation(user, 3_300, "huge")
    _transcript(staff, huge)  # what a process caches once

    short_queries, short_bytes = _transcript(staff, short)
    huge_queries, huge_bytes = _transcript(staff, huge)

    assert huge_queries == short_queries
    assert huge_bytes < 500_000 and abs(huge_bytes - short_bytes) < 0.2 * short_bytes


def test_a_version_whose_parent_is_in_an_earlier_window_links_to_that_window(
    staff: Client, user: Any
) -> None:
    made = long_conversation(user, 420)
    inner = versions.archive_from(made, 400)  # hangs off the version archived next
    outer = versions.archive_from(made, 4)
    rest = long_conversation(user, 400, "rest")
    Message.objects.filter(conversation=rest).update(conversation=made, index=F("index") + 4)

    html = staff.get(change_url(made)).content.decode()

    assert 4 < active_indexes(html)[0] <= 400  # the outer version's start is in an earlier one
    assert f'id="version-{inner.pk}"' in html and f'id="version-{outer.pk}"' not in html
    link = f'of <a href="?at=4#version-{outer.pk}">'
    assert link in html
    earlier = staff.get(f"{change_url(made)}?at=4").content.decode()
    assert f'id="version-{outer.pk}"' in earlier
    assert f'of <a href="#version-{outer.pk}">' not in earlier  # the inner one is not in it
