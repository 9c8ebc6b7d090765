"""Both search backends find the same: the shared cases (chat.testing.search_cases) loaded into
a SQLite site and a PostgreSQL site, asked through `manage.py search --json`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import groupby
from typing import Any

import pytest

from chat.testing import search_cases
from chat.testing.site import Site, beside_sqlite

pytestmark = pytest.mark.scaleout

BUILD = "from chat.testing.search_cases import build; build()"
HOSTILE = """
import json
from chat import search
from chat.models import Conversation
from chat.testing.search_cases import HOSTILE
mine = Conversation.objects.chats().filter(owner__username="ada")
found = {}
for query in HOSTILE:
    for everywhere in (False, True):
        hits = search.search(mine, query, everywhere=everywhere).hits
        found[repr((query, everywhere))] = [(hit.conversation.pk, str(hit.snippet)) for hit in hits]
print(json.dumps(found))
"""
ESTIMATE = """
from django.db import connection
from django.test.utils import CaptureQueriesContext
from chat.admin import base
from chat.models import Message
with connection.cursor() as cursor:
    cursor.execute("ANALYZE chat_message")
base.COUNT_UP_TO = 3
with CaptureQueriesContext(connection) as captured:
    counted = base.EstimatingPaginator(Message.objects.all(), 100).count
    searched = base.EstimatingPaginator(Message.objects.filter(role="user"), 100).count
print(counted, Message.objects.count(), searched)
print("\\n".join(entry["sql"] for entry in captured.captured_queries))
"""


@pytest.fixture(scope="module")
def sites(site: Site) -> Iterator[dict[str, Site]]:
    with beside_sqlite(site, BUILD) as both:
        yield both


def searched(site: Site, user: str, everywhere: bool, queries: list[str]) -> list[Any]:
    options = ["--json", *(["--user", user] if user else []), *(["--everywhere"] * everywhere)]
    found: list[Any] = json.loads(site.manage("search", *options, "--", *queries))
    return found


def hits(results: dict[str, Any]) -> list[tuple[int, str, str]]:
    return [(hit["id"], hit["title_text"], hit["title"]) for hit in results["hits"]]


def test_both_backends_find_the_same_for_every_shared_case(sites: dict[str, Site]) -> None:
    def group(case: search_cases.Case) -> tuple[str, bool]:
        return case.user, case.everywhere

    for (user, everywhere), grouped in groupby(sorted(search_cases.CASES, key=group), group):
        cases = list(grouped)
        queries = [case.query for case in cases]
        lite, postgres = (searched(sites[name], user, everywhere, queries) for name in sites)
        # The same conversations; the snippet's message may differ (PostgreSQL ranks them).
        assert [hits(results) for results in postgres] == [hits(results) for results in lite]
        for case, results in zip(cases, postgres, strict=True):
            assert [hit["title_text"] for hit in results["hits"]] == case.found, case
            marked = [hit for hit in results["hits"] if "<mark>" in hit["snippet"]]
            assert len(marked) == len([hit for hit in results["hits"] if hit["snippet"]])


def test_hostile_queries_answer_alike_and_never_raise(sites: dict[str, Site]) -> None:
    lite, postgres = (
        json.loads(sites[name].manage("shell", "-v0", stdin=HOSTILE)) for name in sites
    )
    assert {query: [pk for pk, _ in found] for query, found in postgres.items()} == {
        query: [pk for pk, _ in found] for query, found in lite.items()
    }
    assert postgres[repr(("pills*", False))] == [[1, "Pick up the <mark>pills</mark> on Tuesday."]]
    first = "I need more <mark>pills</mark> for the long trip"
    assert lite[repr(("pills*", False))] == [[1, first]]


def test_the_admin_counts_an_unfiltered_table_from_postgres_estimate(
    sites: dict[str, Site],
) -> None:
    first, sql = sites["postgresql"].manage("shell", "-v0", stdin=ESTIMATE).split("\n", 1)
    counted, total, searched = map(int, first.split())
    assert counted == total > 3
    assert searched == 3
    assert "pg_class" in sql and "LIMIT 4" in sql
    assert sql.count("COUNT(") == 1
