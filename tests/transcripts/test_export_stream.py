"""Tests of chat.transcripts.export.in_chunks through export_transcripts: an export holds one
chunk of conversations with their rows at a time, whatever its length."""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chat import agent, transcripts
from chat.models import Conversation
from chat.testing import factories as make
from chat.transcripts import export

pytestmark = pytest.mark.django_db

SIZE = 3


def conversations(count: int) -> list[int]:
    owner = make.user("ada")
    made = []
    for number in range(count):
        conversation = make.conversation(owner, f"chat {number}")
        transcripts.append_messages(
            conversation,
            [
                agent.ChatMessage(role="user", content=f"question {number}"),
                agent.ChatMessage(role="assistant", content=f"answer {number}"),
            ],
        )
        made.append(conversation.pk)
    return made


def export_full() -> tuple[list[int], list[str]]:
    """The ids of the exported lines, and the SQL the export ran."""
    out = StringIO()
    with CaptureQueriesContext(connection) as queries:
        call_command("export_transcripts", "--format", "full", stdout=out, stderr=StringIO())
    return [json.loads(line)["id"] for line in out.getvalue().splitlines()], [
        query["sql"] for query in queries.captured_queries
    ]


def fetched(sql: list[str], table: str) -> list[str]:
    """The SELECTs that read rows of `table` (not counts, not subqueries of other tables)."""
    head = re.compile(rf'^SELECT .*? FROM "{table}"')
    return [query for query in sql if head.match(query) and "COUNT(" not in query[:40]]


@pytest.mark.parametrize("count", [7, 6])
def test_export_fetches_conversations_and_their_rows_a_chunk_at_a_time(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = conversations(count)
    monkeypatch.setattr(export, "CHUNK", SIZE)

    ids, sql = export_full()

    assert ids == sorted(made)
    pages = fetched(sql, "chat_conversation")
    # 7 = 3 + 3 + 1 in three pages; 6 = 3 + 3 and an empty page that ends it.
    assert len(pages) == count // SIZE + 1
    assert all(f"LIMIT {SIZE}" in page for page in pages)
    # Each page's messages come in one query naming that page's conversations only.
    messages = fetched(sql, "chat_message")
    assert len(messages) == -(-count // SIZE)
    for query in messages:
        named = re.search(r'"conversation_id" IN \(([^)]*)\)', query)
        assert named is not None and len(named.group(1).split(",")) <= SIZE


def test_chunks_follow_the_primary_key_and_miss_nothing_between_pages() -> None:
    made = conversations(5)
    Conversation.objects.filter(pk=made[1]).delete()

    seen = [conversation.pk for conversation in export.in_chunks(Conversation.objects.all(), 2)]

    assert seen == [made[0], *made[2:]]
