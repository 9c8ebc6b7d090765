from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.db.models.signals import pre_migrate
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from chat import agent, search, transcripts
from chat.models import Conversation, Message
from chat.testing import factories as make
from chat.testing import search_cases

pytestmark = pytest.mark.django_db


def titles(case: search_cases.Case) -> list[str]:
    conversations = Conversation.objects.chats()
    if case.user:
        conversations = conversations.for_user(get_user_model().objects.get(username=case.user))
    found = search.search(conversations, case.query, everywhere=case.everywhere)
    return [str(hit.conversation) for hit in found.hits]


@pytest.fixture
def cases() -> None:
    search_cases.build()


@pytest.mark.parametrize("case", search_cases.CASES, ids=lambda case: repr(case.query))
def test_the_shared_cases(cases: None, case: search_cases.Case) -> None:
    assert titles(case) == case.found


def test_no_query_raises_and_punctuation_is_text(cases: None) -> None:
    for query in search_cases.HOSTILE:
        for everywhere in (False, True):
            found = titles(search_cases.Case(query, "ada", [], everywhere))
            if query in ("pills*", '"pills', "pills'", "\ud800pills"):
                assert found == ["Pharmacy notes"], query


def test_a_rare_term_past_the_recent_conversations_is_found_through_the_index(
    user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "WALK", 3)
    made = [make.conversation(user, f"Note {n}") for n in range(8)]
    for n, conversation in enumerate(made):
        Conversation.objects.filter(pk=conversation.pk).update(
            updated_at=timezone.now() - timedelta(days=n)
        )
    transcripts.append_messages(made[6], [agent.ChatMessage(role="user", content="a quokka")])
    Conversation.objects.filter(pk=made[6].pk).update(updated_at=timezone.now() - timedelta(days=6))
    mine = Conversation.objects.for_user(user)

    def found(query: str, limit: int) -> tuple[list[str], int]:
        with CaptureQueriesContext(connection) as captured:
            results = search.search(mine, query, limit=limit)
        return [str(hit.conversation) for hit in results.hits], len(captured)

    assert found("quokka", 5) == (["Note 6"], 4)  # walked, looked up, rows, snippet
    assert found("note", 2) == (["Note 0", "Note 1"], 3)  # walked, rows, snippets
    assert found("note", 5) == ([f"Note {n}" for n in range(5)], 4)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite copies a table to alter it")
def test_a_migration_that_copies_the_messages_table_leaves_search_working() -> None:
    owner = make.user("ada")
    before = make.conversation(owner, "before")
    transcripts.append_messages(before, [agent.ChatMessage(role="user", content="kestrel")])
    # What a later migration altering messages does on SQLite: around the plan, the signals
    # migrate sends; within it, a copy of the table.
    chat = apps.get_app_config("chat")
    pre_migrate.send(
        chat,
        app_config=chat,
        verbosity=0,
        interactive=False,
        using="default",
        plan=[("a migration", False)],
        apps=apps,
    )
    with connection.schema_editor() as editor:
        editor._remake_table(Message)

    after = make.conversation(owner, "after")
    transcripts.append_messages(after, [agent.ChatMessage(role="user", content="kestrel too")])
    call_command("migrate", verbosity=0)  # post_migrate puts back what the copy dropped
    transcripts.append_messages(after, [agent.ChatMessage(role="user", content="merlin")])

    def found(query: str) -> list[str]:
        hits = search.search(Conversation.objects.for_user(owner), query).hits
        return sorted(str(hit.conversation) for hit in hits)

    assert found("kestrel") == ["after", "before"]  # written while the triggers were gone
    assert found("merlin") == ["after"]  # written after they came back
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE name = 'chat_message_recent'")
        assert cursor.fetchall()
