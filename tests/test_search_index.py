from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from chat import search
from chat.models import Conversation
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
