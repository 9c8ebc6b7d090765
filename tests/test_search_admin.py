"""The admin's search (the index, `everywhere`) and its lists' counts (chat.admin.base)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from chat.admin import base
from chat.models import Conversation, Message
from chat.testing import factories as make
from chat.testing import search_cases

pytestmark = pytest.mark.django_db

CONVERSATIONS = reverse("admin:chat_conversation_changelist")
MESSAGES = reverse("admin:chat_message_changelist")


def listed(client: Client, path: str, query: str) -> tuple[str, list[str]]:
    """The page and the SQL it ran."""
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path, {"q": query} if query else {})
    assert response.status_code == 200
    return response.content.decode(), [entry["sql"] for entry in captured.captured_queries]


def rows(page: str, model: str) -> list[str]:
    return re.findall(rf'<a href="/admin/chat/{model}/\d+/change/[^"]*">([^<]*)</a>', page)


def test_the_admin_searches_every_message_version_and_tool_name(staff: Client) -> None:
    search_cases.build()

    def found(path: str, query: str, model: str) -> list[str]:
        return rows(listed(staff, path, query)[0], model)

    assert found(CONVERSATIONS, "otters", "conversation") == ["Edited"]
    assert found(CONVERSATIONS, "walrus", "conversation") == ["Tools"]
    assert found(CONVERSATIONS, "search_car", "conversation") == ["Tools"]
    assert found(CONVERSATIONS, "pills", "conversation") == ["Secret plans", "Pharmacy notes"]
    assert found(CONVERSATIONS, '"go hik"', "conversation") == []
    tool_call = Message.objects.get(tool_calls__0__function__name="search_cards")
    assert found(MESSAGES, "search cards", "message") == [str(tool_call)]
    assert len(found(MESSAGES, "pills", "message")) == 3
    for query in search_cases.HOSTILE:
        if "\ud800" in query:  # no URL can carry a lone surrogate
            continue
        listed(staff, CONVERSATIONS, query)
        listed(staff, MESSAGES, query)


def test_lists_count_at_most_a_bound_and_never_the_whole_table(
    staff: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "COUNT_UP_TO", 10)
    owner = make.user("ada")
    for n in range(4):
        make.big_conversation(owner, messages=6, tool_calls=0, runs=1, title=f"long {n}")

    page, few = listed(staff, MESSAGES, "")
    assert "10 messages" in page
    counts = [sql for sql in few if "COUNT(" in sql.upper()]
    assert counts and all("LIMIT 11" in sql for sql in counts), counts
    searched, _ = listed(staff, CONVERSATIONS, "long")
    assert "4 conversations" in searched and "total" not in searched

    make.big_conversation(owner, messages=30, tool_calls=0, runs=1, title="longer")
    assert len(listed(staff, MESSAGES, "")[1]) == len(few)
    assert Conversation.objects.count() == 5 and Message.objects.count() == 54


@pytest.mark.skipif(connection.vendor != "sqlite", reason="tests/scaleout has PostgreSQL's")
def test_sqlite_has_no_estimate_and_counts_up_to_the_bound() -> None:
    assert base.estimated_rows(Message.objects.all()) is None
