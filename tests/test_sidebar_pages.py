"""The sidebar a page at a time (chat/sidebar.py): the latest conversations on every page, the
next ones by a cursor as the list scrolls, and a page that costs the same whatever the history."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from chat import sidebar
from chat.models import Conversation, Run, RunStatus
from chat.testing import factories as make

pytestmark = pytest.mark.django_db

MORE = re.compile(r'<a href="([^"]+)" hx-get="\1" hx-trigger="click, intersect once"[^>]*>')
HX = {"HX-Request": "true"}


def noon(days_ago: int = 0) -> datetime:
    """Midday, `days_ago` days back: conversations minutes apart from then share a date group
    whatever the hour the test runs at (one later today counts as today)."""
    today = timezone.localtime().replace(hour=12, minute=0, second=0, microsecond=0)
    return today - timedelta(days=days_ago)


def made(
    owner: Any,
    count: int,
    *,
    start: datetime | None = None,
    step: timedelta = timedelta(minutes=1),
    title: str = "Plan {}",
    **fields: Any,
) -> list[Conversation]:
    """`count` conversations of `owner`, most recent first: the first updated at `start` (today
    at noon), each next one `step` earlier."""
    start = start or noon()
    rows = Conversation.objects.bulk_create(
        Conversation(owner=owner, title=title.format(n), **fields) for n in range(count)
    )
    for n, row in enumerate(rows):
        row.updated_at = start - step * n
    Conversation.objects.bulk_update(rows, ["updated_at"])
    return rows


def links(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'id="conversation-link-(\d+)"', html)]


def shared_links(html: str) -> list[int]:
    shared = html.partition('class="shared-list"')[2] or html
    return [int(pk) for pk in re.findall(r'<a href="/c/(\d+)/"', shared)]


def next_url(html: str, name: str = "Show more conversations") -> str | None:
    found = [url for url in MORE.findall(html) if f">{name}</a>" in html.partition(url)[2][:400]]
    return found[0].replace("&amp;", "&") if found else None


def headings(html: str) -> list[str]:
    return re.findall(r'<h2 class="conversation-group"[^>]*>([^<]*)</h2>', html)


def every_page(client: Client, html: str, name: str = "Show more conversations") -> list[str]:
    """The pages after the one in `html`, each fetched as the list fetches it."""
    pages = []
    while (url := next_url(html, name)) is not None:
        response = client.get(url, headers=HX)
        assert response.status_code == 200
        html = response.content.decode()
        pages.append(html)
    return pages


def test_every_page_shows_the_latest_fifty_and_scrolling_brings_the_rest_once(
    client_in: Client, user: Any
) -> None:
    rows = made(user, 120)
    expected = [row.pk for row in rows]

    first = client_in.get(reverse("chat:conversation_detail", args=[rows[0].pk])).content.decode()
    pages = every_page(client_in, first)

    assert links(first) == expected[: sidebar.PAGE]
    assert f"after={sidebar.Cursor.of(rows[49])}&amp;group=1&amp;current={rows[0].pk}" in first
    assert [len(links(page)) for page in pages] == [50, 20]
    assert links(first) + [pk for page in pages for pk in links(page)] == expected
    assert "Show more conversations" not in pages[-1]


def test_a_next_page_continues_the_date_group_the_list_ends_in(
    client_in: Client, user: Any
) -> None:
    today = made(user, 60, title="Today {}")
    older = made(user, 60, start=noon(90), title="Older {}")

    first = client_in.get(reverse("chat:evals:index")).content.decode()
    second, third = every_page(client_in, first)

    assert headings(first) == ["Today"]
    # The rest of Today goes under the heading the list has, then Older starts.
    continued, _, rest = second.partition("</ul>")
    assert '<ul hx-swap-oob="beforeend:#conversation-group-list-1">' in continued
    assert links(continued) == [row.pk for row in today[50:]]
    assert headings(second) == ["Older"]
    assert 'id="conversation-group-list-5" aria-labelledby="conversation-group-5"' in rest
    assert links(rest) == [row.pk for row in older[:40]]
    assert "group=5" in second
    assert headings(third) == [] and "beforeend:#conversation-group-list-5" in third
    # Without script the same page stands alone, under its headings.
    alone = client_in.get(next_url(first) or "").content.decode()
    assert headings(alone) == ["Today", "Older"] and "hx-swap-oob" not in alone
    assert "<h1" in alone and "Your conversations" in alone


def test_a_cleared_search_brings_back_the_first_page_and_its_next(
    client_in: Client, user: Any
) -> None:
    rows = made(user, 60)
    search = reverse("chat:conversation_search")

    cleared = client_in.get(search, {"q": "", "current": str(rows[55].pk)}, headers=HX)
    [rest] = every_page(client_in, cleared.content.decode())

    assert links(cleared.content.decode()) == [row.pk for row in rows[:50]]
    assert links(rest) == [row.pk for row in rows[50:]]
    assert f'id="conversation-link-{rows[55].pk}" href="/c/{rows[55].pk}/" aria-current' in rest


def test_without_script_the_end_of_the_list_says_so(client_in: Client, user: Any) -> None:
    rows = made(user, 2)
    after = str(sidebar.Cursor.of(rows[-1]))

    html = client_in.get(reverse("chat:sidebar_more", args=["mine"]), {"after": after})

    assert "No earlier conversations." in html.content.decode()
    assert links(html.content.decode()) == []


def test_a_list_drawn_before_midnight_is_continued_under_the_group_it_shows(
    client_in: Client, user: Any
) -> None:
    """The list says which group it ends in: its labels may have aged since it was drawn."""
    rows = made(user, 3, start=noon(1))
    url = reverse("chat:sidebar_more", args=["mine"])
    after = str(sidebar.Cursor.of(rows[0]))

    drawn_yesterday = client_in.get(url, {"after": after, "group": "1"}, headers=HX)
    drawn_today = client_in.get(url, {"after": after, "group": "2"}, headers=HX)
    guessed = client_in.get(url, {"after": after}, headers=HX)

    assert headings(drawn_yesterday.content.decode()) == ["Yesterday"]
    assert "beforeend:#conversation-group-list-2" in drawn_today.content.decode()
    assert "beforeend:#conversation-group-list-2" in guessed.content.decode()


def test_conversations_updated_at_the_same_moment_are_split_by_id(
    client_in: Client, user: Any
) -> None:
    rows = made(user, 120, step=timedelta(0))
    by_id = sorted((row.pk for row in rows), reverse=True)

    first = client_in.get(reverse("chat:evals:index")).content.decode()
    pages = every_page(client_in, first)
    mine = Conversation.objects.filter(owner=user)
    small = [sidebar.page(mine, size=3)]
    while small[-1].next is not None:
        small.append(sidebar.page(mine, small[-1].next, size=3))

    assert links(first) + [pk for page in pages for pk in links(page)] == by_id
    assert [[c.pk for c in page.conversations] for page in small][:2] == [by_id[:3], by_id[3:6]]
    assert [c.pk for page in small for c in page.conversations] == by_id
    assert len({c.updated_at for c in mine}) == 1


@pytest.mark.parametrize(
    "query",
    [
        {"after": "yesterday"},
        {"after": ""},
        {"after": "12_"},
        {"after": "_12"},
        {"after": "1.5_12"},
        {"after": "١٢_٣"},  # digits, but not the ones a cursor is written with
        {"after": "999999999999999999_1"},  # after the year 9999
        {"after": "-999999999999999999_1"},
        {"after": "12_34", "group": "6"},
        {"after": "12_34", "group": "Today"},
        {"after": "12_34", "group": "٢"},
    ],
)
def test_a_bad_cursor_is_refused_in_one_line(
    client_in: Client, user: Any, query: dict[str, str]
) -> None:
    made(user, 3)

    response = client_in.get(reverse("chat:sidebar_more", args=["mine"]), query, headers=HX)

    assert response.status_code == 400
    assert response.content.decode() == sidebar.BAD_CURSOR
    assert response["Content-Type"].startswith("text/plain")


def test_the_pages_need_a_login_and_a_known_list(client: Client, client_in: Client) -> None:
    url = reverse("chat:sidebar_more", args=["mine"])

    assert client.get(url).status_code == 302
    assert client_in.get(reverse("chat:sidebar_more", args=["everyone"])).status_code == 404
    assert client_in.get(url, headers=HX).status_code == 200


def test_another_users_conversations_never_appear(client_in: Client, user: Any) -> None:
    moment = timezone.now()
    mine = made(user, 70, start=moment, step=timedelta(0))
    theirs = made(make.user("bob"), 70, start=moment, step=timedelta(0), shared=True)
    cursor = sidebar.Cursor.of(theirs[10])

    first = client_in.get(reverse("chat:evals:index")).content.decode()
    pages = every_page(client_in, first)
    from_theirs = client_in.get(
        reverse("chat:sidebar_more", args=["mine"]), {"after": str(cursor)}, headers=HX
    )

    listed = links(first) + [pk for page in pages for pk in links(page)]
    assert sorted(listed) == sorted(row.pk for row in mine)
    assert set(links(from_theirs.content.decode())) <= {row.pk for row in mine}


def test_the_shared_list_is_bounded_the_same_way(
    client_in: Client, user: Any, django_assert_max_num_queries: Callable[..., Any]
) -> None:
    bob = make.user("bob")
    shared = made(bob, 70, shared=True, title="Bob's {}")
    made(bob, 5, title="Private {}")
    made(user, 3, shared=True, title="Mine shared {}")

    first = client_in.get(reverse("chat:evals:index")).content.decode()
    with django_assert_max_num_queries(3):  # session, user, the page with its owners
        pages = every_page(client_in, first, "Show more shared conversations")

    assert shared_links(first)[: sidebar.PAGE] == [row.pk for row in shared[:50]]
    assert [shared_links(page) for page in pages] == [[row.pk for row in shared[50:]]]
    assert "· bob" in pages[0] and "Private" not in pages[0] and "Mine shared" not in pages[0]
    assert "Show more shared conversations" not in pages[0]
    alone = client_in.get(next_url(first, "Show more shared conversations") or "").content
    assert "<h1" in alone.decode() and shared_links(alone.decode()) == shared_links(pages[0])


def test_the_current_conversation_is_marked_when_its_page_comes(
    client_in: Client, user: Any
) -> None:
    rows = made(user, 70)
    current = rows[60]

    first = client_in.get(reverse("chat:conversation_detail", args=[current.pk])).content.decode()
    [second] = every_page(client_in, first)

    assert (
        'aria-current="page"'
        not in first.partition('id="conversation-results"')[2].partition("</nav>")[0]
    )
    assert (
        f'<li class="current"><a id="conversation-link-{current.pk}" href="/c/{current.pk}/" '
        'aria-current="page">'
    ) in second


def test_waiting_marks_come_with_their_page_in_one_bounded_query(
    client_in: Client, user: Any, django_assert_max_num_queries: Callable[..., Any]
) -> None:
    rows = made(user, 70)
    Run.objects.create(conversation=rows[60], status=RunStatus.REQUIRES_ACTION)
    Run.objects.create(conversation=rows[61], status=RunStatus.COMPLETED)

    with CaptureQueriesContext(connection) as first_page:
        first = client_in.get(reverse("chat:evals:index")).content.decode()
    url = next_url(first) or ""
    with django_assert_max_num_queries(4):  # session, user, the page, its waiting marks
        second = client_in.get(url, headers=HX).content.decode()

    assert "Waiting for your approval" not in first
    marked = '><span class="waiting-mark" title="Waiting for your approval">'
    assert f'href="/c/{rows[60].pk}/"{marked}' in second
    assert f'href="/c/{rows[61].pk}/">' in second
    assert f'href="/c/{rows[61].pk}/"{marked}' not in second
    # One query marks the page's lines, waiting and news alike (chat.news.marks).
    [marks] = [q["sql"] for q in first_page.captured_queries if 'FROM "chat_run"' in q["sql"]]
    assert "IN (" in marks


PAGES: dict[str, Callable[[Conversation], str]] = {
    "conversation": lambda c: reverse("chat:conversation_detail", args=[c.pk]),
    "settings": lambda c: reverse("chat:conversation_settings", args=[c.pk]),
    "fork": lambda c: reverse("chat:fork_message", args=[c.pk, 0]),
    "run": lambda c: reverse("chat:run_detail", args=[c.pk, c.runs.order_by("pk")[0].pk]),
    "evaluations": lambda c: reverse("chat:evals:index"),
    "search list": lambda c: f"{reverse('chat:conversation_search')}?q=",
}
LINK_BYTES = 200
"""The most a sidebar line costs: its markup, a four-digit id twice, a title of 40 characters.
Its menu of actions is the page's one (static/js/list.js puts it under the line)."""


def cost(owner: Any, history: int) -> dict[str, tuple[int, int]]:
    """Each page's (queries, bytes) for `owner`, who has `history` conversations, one of them
    the conversation every page shows."""
    shown = make.rich_conversation(owner)
    made(owner, history - 1, start=noon(3), title="Quarterly plan {}")
    client = Client()
    client.force_login(owner)
    found = {}
    for name, url in PAGES.items():
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url(shown))
        assert response.status_code == 200, name
        found[name] = (len(queries), len(response.content))
    return found


def test_a_page_costs_the_same_whatever_the_history() -> None:
    """A user with 3,000 conversations: the queries of a user with one, and the bytes of a
    user with one page of them (the sidebar's links: at most one page more than a user with
    one conversation)."""
    light = cost(make.user("light"), 1)
    page_full = cost(make.user("page_full"), sidebar.PAGE + 10)
    heavy = cost(make.user("heavy"), 3_000)

    for name, (queries, size) in heavy.items():
        assert queries == light[name][0] == page_full[name][0], name
        assert abs(size - page_full[name][1]) <= 0.02 * size, name
        assert size - light[name][1] <= sidebar.PAGE * LINK_BYTES, name
    conversation_page = heavy["conversation"][1]
    assert conversation_page < 60_000  # was 3,000 links: about 480 KB
    assert conversation_page <= 1.2 * light["conversation"][1]
