from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from chat import agent, search, transcripts
from chat.models import Conversation
from chat.testing import factories as make
from chat.transcripts import versions

pytestmark = pytest.mark.django_db

URL = reverse("chat:conversation_search")


def said(conversation: Conversation, *texts: str) -> Conversation:
    """The conversation, with user and assistant messages taking turns."""
    roles = ["user", "assistant"]
    transcripts.append_messages(
        conversation,
        [agent.ChatMessage(role=roles[n % 2], content=text) for n, text in enumerate(texts)],
    )
    return conversation


def found(client: Client, query: str, **extra: str) -> str:
    response = client.get(URL, {"q": query, **extra}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    return response.content.decode()


def links(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'id="conversation-link-(\d+)"', html)]


def hits(client: Client, query: str) -> list[search.Hit]:
    response = client.get(URL, {"q": query})
    return list(response.context["results"].hits)


def test_finds_conversations_by_title_case_insensitively(client_in: Client, user: Any) -> None:
    trip = make.conversation(user, "Trip to Lisbon")
    make.conversation(user, "Groceries")

    html = found(client_in, "lisBON")

    assert links(html) == [trip.pk]
    assert "Trip to <mark>Lisbon</mark>" in html
    assert "1 conversation matches." in html


def test_finds_message_text_and_shows_a_snippet_around_the_match(
    client_in: Client, user: Any
) -> None:
    filler = "Some words before the interesting part of the message come first here. " * 3
    made = said(
        make.conversation(user, "Chat"),
        "Hello there",
        filler + "The capital of Portugal is Lisbon, by the river Tagus. " + filler,
    )

    html = found(client_in, "portugal")

    assert links(html) == [made.pk]
    snippet = re.search(r'<span class="hit-snippet">(.*?)</span>', html, re.S)
    assert snippet is not None
    text = snippet.group(1)
    assert "The capital of <mark>Portugal</mark> is Lisbon" in text
    assert text.startswith("…") and text.endswith("…")
    assert len(re.sub(r"</?mark>", "", text)) <= search.SNIPPET_CHARS + 2
    assert "Hello there" not in text


def test_every_word_must_match_somewhere_in_the_title_or_the_messages(
    client_in: Client, user: Any
) -> None:
    both = said(make.conversation(user, "Weekend plans"), "Let us go hiking", "Bring water")
    said(make.conversation(user, "Weekend shopping"), "Buy bread")
    said(make.conversation(user, "Hiking gear"), "Boots")

    assert links(found(client_in, "weekend hiking")) == [both.pk]
    assert links(found(client_in, "hiking water weekend")) == [both.pk]
    assert links(found(client_in, "weekend hiking bread")) == []
    assert links(found(client_in, '"go hiking"')) == [both.pk]
    [hit] = hits(client_in, "weekend hiking")
    assert hit.title == "<mark>Weekend</mark> plans"
    assert hit.snippet == "Let us go <mark>hiking</mark>"


def test_no_match_says_so_and_an_empty_query_brings_back_the_list(
    client_in: Client, user: Any
) -> None:
    made = make.conversation(user, "Only one")

    nothing = found(client_in, "  zebra   <b>  ")
    assert links(nothing) == []
    assert "No conversation matches “zebra &lt;b&gt;”." in nothing

    listed = found(client_in, "   ", current=str(made.pk))
    assert links(listed) == [made.pk]
    assert '<h2 class="conversation-group" id="conversation-group-1">Today</h2>' in listed
    assert 'aria-current="page"' in listed
    assert '<span id="search-status" hx-swap-oob="innerHTML"></span>' in listed


def test_hostile_titles_and_messages_stay_text(client_in: Client, user: Any) -> None:
    said(
        make.conversation(user, "<script>alert('title')</script>"),
        "look: <img src=x onerror=alert(1)> <script>alert(2)</script>",
    )

    for query in ["script", "<script>", "onerror", "img src"]:
        html = found(client_in, query)
        assert len(links(html)) == 1, query
        assert "<script" not in html and "<img" not in html, query
    html = found(client_in, "<script>")  # punctuation separates words: the word is script
    assert "&lt;<mark>script</mark>&gt;alert(&#x27;title&#x27;)" in html
    assert (
        "onerror=alert(1)&gt; &lt;<mark>script</mark>&gt;alert(2)&lt;/<mark>script</mark>&gt;<"
        in html
    )


def test_another_users_conversations_are_never_found(client_in: Client, user: Any) -> None:
    mallory = make.user("mallory")
    said(make.conversation(mallory, "secret plans"), "the secret is out")
    mine = make.conversation(user, "My plans")

    assert links(found(client_in, "secret")) == []
    assert links(found(client_in, "plans")) == [mine.pk]
    assert "secret" not in found(client_in, "")


def test_anonymous_is_sent_to_log_in_and_only_get_is_allowed(client_in: Client) -> None:
    response = Client().get(URL, {"q": "plans"})
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert client_in.post(URL, {"q": "plans"}).status_code == 405


def test_only_the_active_path_and_the_text_the_reader_sees_count(
    client_in: Client, user: Any
) -> None:
    made = said(make.conversation(user, "Edited"), "What about otters?", "Otters are lovely.")
    versions.archive_from(made, 0)
    said(made, "What about beavers?", "Beavers build dams.")
    transcripts.append_messages(
        made, [agent.ChatMessage(role="tool", tool_call_id="c1", content="walrus facts")]
    )

    assert links(found(client_in, "otters")) == []
    assert links(found(client_in, "walrus")) == []
    assert links(found(client_in, "beavers")) == [made.pk]


def test_results_are_limited_and_say_when_there_are_more(client_in: Client, user: Any) -> None:
    for n in range(search.LIMIT + 2):
        make.conversation(user, f"Report {n}")

    html = found(client_in, "report")

    assert len(links(html)) == search.LIMIT
    assert "More than 50 conversations match: the most recent are shown." in html
    assert "<mark>Report</mark> 51<" in html and "<mark>Report</mark> 0<" not in html


def test_the_number_of_queries_does_not_grow_with_the_conversations(
    client_in: Client, user: Any
) -> None:
    def queries(query: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            found(client_in, query)
        return len(captured)

    said(make.conversation(user, "Alpha"), "the needle is here", "and a second needle")
    few = queries("needle alpha"), queries("")
    for n in range(20):
        said(make.conversation(user, f"Alpha {n}"), f"needle number {n}", "more hay")

    assert (queries("needle alpha"), queries("")) == few
    # The session and user, then the matches (the recent ones tested), their rows and snippets.
    assert few[0] <= few[1] + 2


def test_snippets_cut_long_text_at_spaces_around_the_first_match() -> None:
    pattern = re.compile("needle", re.IGNORECASE)
    before, after = "hay " * 50, " straw" * 50

    assert search.snippet("A short needle.", 1, pattern) == "A short <mark>needle</mark>."
    cut = search.snippet(before + "Needle" + after, 1, pattern)
    assert cut.startswith("…hay ") and "<mark>Needle</mark> straw" in cut and cut.endswith("…")
    window = ("ay " + before)[:90] + "needle and more"
    mid_word = search.snippet(window, 42, pattern)
    assert mid_word.startswith("…hay ") and mid_word.endswith("<mark>needle</mark> and more")
    assert search.snippet("  no match  here ", 1, pattern) == "no match here"
    assert search.snippet("", 1, pattern) == ""


def test_search_terms() -> None:
    found = search.terms(' time "in  Paris" Time co-op ')
    assert [(term.text, term.tokens, term.exact) for term in found] == [
        ("time", ("time",), False),
        ("in Paris", ("in", "Paris"), True),
        ("co-op", ("co", "op"), False),
    ]
    assert [term.text for term in search.terms("'unclosed")] == ["'unclosed"]
    assert [term.text for term in search.terms('"" x ! :* ()')] == ["x"]
    assert len(search.terms(" ".join(f"w{n}" for n in range(30)))) == search.MAX_WORDS


def test_highlights_start_at_words_and_phrases_allow_punctuation_between() -> None:
    pattern = search._pattern(search.terms('pil "go hiking"'))
    assert search.highlight("Pills, capillary; go, hiking!", pattern) == (
        "<mark>Pills</mark>, capillary; <mark>go, hiking</mark>!"
    )


@pytest.mark.parametrize(
    ("days_ago", "group"),
    [
        (-1, "Today"),
        (0, "Today"),
        (1, "Yesterday"),
        (2, "Previous 7 days"),
        (7, "Previous 7 days"),
        (8, "Previous 30 days"),
        (30, "Previous 30 days"),
        (31, "Older"),
        (400, "Older"),
    ],
)
def test_date_groups(days_ago: int, group: str) -> None:
    today = date(2025, 3, 10)
    assert search.date_group(today - timedelta(days=days_ago), today) == group


def test_the_list_is_grouped_by_the_last_update_in_the_server_time_zone(
    client_in: Client, user: Any, settings: Any
) -> None:
    settings.TIME_ZONE = "Europe/Paris"
    now = timezone.localtime()
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    ages = {
        "just now": now,
        "early today": midnight + timedelta(minutes=1),
        "late yesterday": midnight - timedelta(minutes=1),
        "two days ago": midnight - timedelta(days=1, minutes=1),
        "a week ago": midnight - timedelta(days=6, minutes=1),
        "eight days ago": midnight - timedelta(days=7, minutes=1),
        "a month ago": midnight - timedelta(days=29, minutes=1),
        "long ago": midnight - timedelta(days=30, minutes=1),
    }
    for title, moment in ages.items():
        made = make.conversation(user, title)
        Conversation.objects.filter(pk=made.pk).update(updated_at=moment)

    html = found(client_in, "")
    groups = re.findall(r'<h2 class="conversation-group"[^>]*>([^<]*)</h2>(.*?)</ul>', html, re.S)

    assert [(label, re.findall(r">([a-z ]+)</a>", items)) for label, items in groups] == [
        ("Today", ["just now", "early today"]),
        ("Yesterday", ["late yesterday"]),
        ("Previous 7 days", ["two days ago", "a week ago"]),
        ("Previous 30 days", ["eight days ago", "a month ago"]),
        ("Older", ["long ago"]),
    ]


def test_every_page_with_the_sidebar_lists_by_date_without_empty_groups(
    client_in: Client, user: Any
) -> None:
    old = make.conversation(user, "Old one")
    Conversation.objects.filter(pk=old.pk).update(
        updated_at=timezone.make_aware(datetime(2020, 1, 1))
    )
    current = said(make.conversation(user, "Current one"), "hi")

    for name, args in [
        ("conversation_detail", [current.pk]),
        ("conversation_settings", [current.pk]),
        ("fork_message", [current.pk, 0]),
    ]:
        page = client_in.get(reverse(f"chat:{name}", args=args)).content.decode()
        groups = re.findall(r'<h2 class="conversation-group"[^>]*>([^<]*)<', page)
        assert groups == ["Today", "Older"], name
        current_link = f'id="conversation-link-{current.pk}" href="/c/{current.pk}/" aria-current'
        assert current_link in page, name
        assert '<label for="conversation-search" class="visually-hidden">Search conversations<' in (
            page
        )
        assert 'type="search" id="conversation-search"' in page
        assert f'hx-vals=\'{{"current": "{current.pk}"}}\'' in page


def test_the_first_screen_has_the_search_and_no_list(client: Client) -> None:
    client.force_login(make.user("newcomer"))

    page = client.get(reverse("chat:conversation_list")).content.decode()

    assert "No conversations yet." in page
    assert 'id="conversation-search"' in page and "hx-vals" not in page


def test_a_hit_opens_its_conversation_at_the_matching_message(client_in: Client, user: Any) -> None:
    long = said(
        make.conversation(user, "A long one"),
        "the kestrel question",
        "an answer",
        *(f"filler {n}" for n in range(160)),
    )
    recent = said(make.conversation(user, "A short one"), "another kestrel", "and a reply")
    only_title = make.conversation(user, "kestrel notes")

    html = found(client_in, "kestrel")

    detail = {pk: reverse("chat:conversation_detail", args=[pk]) for pk in (long.pk, recent.pk)}
    assert f'href="{detail[long.pk]}?at=0#message-0"' in html
    assert f'href="{detail[recent.pk]}?at=0#message-0"' in html
    assert f'href="{reverse("chat:conversation_detail", args=[only_title.pk])}"' in html
    page = client_in.get(f"{detail[long.pk]}?at=0").content.decode()
    assert 'id="message-0"' in page and "the kestrel question" in page
    assert 'id="message-0"' not in client_in.get(detail[long.pk]).content.decode()


@pytest.mark.parametrize(
    ("moment", "shown"),
    [
        (datetime(2026, 3, 9, 14, 5), "14:05"),
        (datetime(2026, 3, 8, 23, 59), "8 Mar"),
        (datetime(2026, 1, 2, 9, 0), "2 Jan"),
        (datetime(2025, 12, 31, 9, 0), "31 Dec 2025"),
    ],
)
def test_a_hits_date_is_short_in_the_server_time_zone(moment: datetime, shown: str) -> None:
    aware = timezone.make_aware(moment)

    assert search.short_date(aware, today=date(2026, 3, 9)) == shown


def test_each_hit_shows_when_its_conversation_was_last_updated(
    client_in: Client, user: Any
) -> None:
    old = said(make.conversation(user, "Heron notes"), "a heron")
    moment = timezone.make_aware(datetime(2024, 5, 17, 10, 30))
    Conversation.objects.filter(pk=old.pk).update(updated_at=moment)

    html = found(client_in, "heron")

    assert f'<time class="hit-date" datetime="{moment.isoformat()}">17 May 2024</time>' in html


def test_archived_conversations_are_not_searched_here(client_in: Client, user: Any) -> None:
    kept = said(make.conversation(user, "Otter facts"), "otters")
    archived = said(make.conversation(user, "Otter photos"), "more otters")
    Conversation.objects.filter(pk=archived.pk).update(archived_at=timezone.now())

    assert links(found(client_in, "otter")) == [kept.pk]
    assert [
        hit.conversation.pk
        for hit in search.search(search.searched(user, archived=True), "otter").hits
    ] == [archived.pk]
