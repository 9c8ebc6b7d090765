"""What the owner does from a line of the list (chat/list_actions.py): pin on top, archive out
of the list and its search, delete with a page's undo window; and what keeps a conversation's
place (a rename, sharing) or keeps it out of the list (no message yet)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chat import list_actions, sidebar
from chat.models import Conversation, Message, Run, RunStatus
from chat.testing import factories as make
from tests.test_sidebar_pages import HX, every_page, headings, links, made, next_url, noon

pytestmark = pytest.mark.django_db

ACT = reverse("chat:list_action")


def page(client: Client, url: str | None = None) -> str:
    return client.get(url or reverse("chat:evals:index")).content.decode()


def pinned_links(html: str) -> list[int]:
    group = html.partition('id="conversation-group-list-pinned"')[2].partition("</ul>")[0]
    return links(group)


def dated_links(html: str) -> list[int]:
    rest = html.partition('id="conversation-group-list-pinned"')
    return links(rest[2].partition("</ul>")[2] if rest[1] else html)


def act(
    client: Client,
    do: str,
    conversation: Conversation,
    headers: dict[str, str] | None = None,
    **data: str,
) -> Any:
    return client.post(ACT, {do: str(conversation.pk), **data}, headers=headers or {})


def test_a_rename_and_sharing_keep_the_conversations_place_in_the_list(
    client_in: Client, user: Any
) -> None:
    rows = made(user, 3, start=noon(3))
    before = Conversation.objects.get(pk=rows[2].pk).updated_at

    client_in.post(reverse("chat:conversation_rename", args=[rows[2].pk]), {"title": "Renamed"})
    client_in.post(reverse("chat:conversation_share", args=[rows[2].pk]), {"shared": "on"})

    after = Conversation.objects.get(pk=rows[2].pk)
    assert (after.title, after.shared, after.updated_at) == ("Renamed", True, before)
    html = page(client_in)
    assert links(html) == [row.pk for row in rows]
    assert headings(html) == ["Previous 7 days"]


def test_pinned_conversations_lead_the_list_latest_pin_first_and_only_there(
    client_in: Client, user: Any
) -> None:
    rows = made(user, 5)

    for row in (rows[4], rows[1]):
        assert act(client_in, "pin", row).status_code == 302

    html = page(client_in)
    assert headings(html) == ["Pinned", "Today"]
    assert pinned_links(html) == [rows[1].pk, rows[4].pk]
    assert dated_links(html) == [rows[0].pk, rows[2].pk, rows[3].pk]
    assert Conversation.objects.get(pk=rows[1].pk).updated_at == rows[1].updated_at
    # Unpinned, it is back in its date group, where it was.
    act(client_in, "unpin", rows[1])
    assert dated_links(page(client_in)) == [rows[0].pk, rows[1].pk, rows[2].pk, rows[3].pk]


def test_paging_skips_the_pinned_ones_and_shows_every_other_conversation_once(
    client_in: Client, user: Any
) -> None:
    rows = made(user, 70)
    pins = [rows[60], rows[10], rows[55]]
    for row in pins:
        act(client_in, "pin", row)

    first = page(client_in)
    rest = every_page(client_in, first)

    assert pinned_links(first) == [row.pk for row in reversed(pins)]
    shown = dated_links(first) + [pk for more in rest for pk in links(more)]
    assert shown == [row.pk for row in rows if row not in pins]
    assert all("Pinned" not in more for more in rest)


def test_the_list_shows_at_most_pins_pinned_conversations(client_in: Client, user: Any) -> None:
    rows = made(user, sidebar.PINS + 2)
    now = timezone.now()
    for n, row in enumerate(rows):
        Conversation.objects.filter(pk=row.pk).update(pinned_at=now - timedelta(seconds=n))

    assert pinned_links(page(client_in)) == [row.pk for row in rows[: sidebar.PINS]]


def test_archived_conversations_leave_the_list_and_its_search_for_a_list_of_their_own(
    client_in: Client, user: Any
) -> None:
    rows = made(user, 4, title="Budget {}")
    act(client_in, "pin", rows[1])
    act(client_in, "archive", rows[1])
    act(client_in, "archive", rows[2])

    assert links(page(client_in)) == [rows[0].pk, rows[3].pk]
    found = client_in.get(reverse("chat:conversation_search"), {"q": "budget"}).content.decode()
    assert links(found) == [rows[0].pk, rows[3].pk]
    archived = page(client_in, reverse("chat:archived"))
    assert links(archived.partition('id="archived-list"')[2].partition("</ul>")[0]) == [
        rows[1].pk,
        rows[2].pk,
    ]
    assert (
        'name="unarchive"' in archived
        and 'name="pin"' not in archived.partition("archived-list")[2]
    )
    searched = client_in.get(reverse("chat:archived"), {"q": "budget 2"}).content.decode()
    assert links(searched.partition('id="archived-list"')[2]) == [rows[2].pk]
    # Archiving unpinned it; unarchived, it is back where it was by date.
    assert Conversation.objects.get(pk=rows[1].pk).pinned_at is None
    act(client_in, "unarchive", rows[1])
    assert links(page(client_in)) == [rows[0].pk, rows[1].pk, rows[3].pk]


def test_the_archived_list_pages_by_a_cursor(client_in: Client, user: Any) -> None:
    rows = made(user, sidebar.PAGE + 5, archived_at=timezone.now())

    first = page(client_in, reverse("chat:archived"))
    [rest] = every_page(client_in, first, "Show more archived conversations")

    assert links(first.partition('id="archived-list"')[2]) == [r.pk for r in rows[:50]]
    assert links(rest) == [row.pk for row in rows[50:]]
    # Without script, the next page is a page of its own.
    alone = page(client_in, next_url(first, "Show more archived conversations"))
    assert "<h1" in alone and "Archived conversations" in alone
    assert links(alone.partition('id="archived-list"')[2]) == [row.pk for row in rows[50:]]


def test_the_lists_script_gets_the_list_as_it_is_now(client_in: Client, user: Any) -> None:
    rows = made(user, 3)

    response = act(client_in, "pin", rows[2], current=str(rows[0].pk), headers=HX)

    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert pinned_links(html) == [rows[2].pk]
    assert f'id="conversation-link-{rows[0].pk}" href="/c/{rows[0].pk}/" aria-current' in html


def test_only_the_owner_acts_on_a_line(client: Client, client_in: Client, user: Any) -> None:
    theirs = make.conversation(make.user("bo"), "Theirs")
    Conversation.objects.filter(pk=theirs.pk).update(shared=True)

    for do in list_actions.DONE:
        assert act(client_in, do, theirs, confirmed="1").status_code == 404
        assert act(client, do, theirs).status_code == 302  # to the login page
    assert client_in.get(ACT).status_code == 405
    kept = Conversation.objects.get(pk=theirs.pk)
    assert (kept.pinned_at, kept.archived_at) == (None, None)


@pytest.mark.parametrize(
    "data", [{}, {"pin": "x"}, {"pin": "1", "archive": "1"}, {"delete": "9" * 19}]
)
def test_an_action_that_cannot_be_read_is_refused_in_one_line(
    client_in: Client, data: dict[str, str]
) -> None:
    response = client_in.post(ACT, data)

    assert response.status_code == 400
    assert response.content.decode() == list_actions.NOT_UNDERSTOOD


def test_a_delete_from_the_script_is_real_only_once_the_undo_window_passed(
    client_in: Client, user: Any
) -> None:
    """The page hides the line and sends the delete when the window passes: until then (and
    for ever, if the tab closes first) the conversation is all there."""
    kept, gone = made(user, 2)
    Message.objects.create(conversation=kept, index=0, role="user", content="hi")

    # Undo, or a tab closed: nothing was sent, nothing changed.
    assert links(page(client_in)) == [kept.pk, gone.pk]
    response = act(client_in, "delete", gone, confirmed="1", headers=HX)

    assert response.status_code == 204
    assert not Conversation.objects.filter(pk=gone.pk).exists()
    assert Message.objects.filter(conversation=kept).count() == 1
    assert links(page(client_in)) == [kept.pk]


def test_without_script_a_delete_asks_first(client_in: Client, user: Any) -> None:
    [row] = made(user, 1, title="Trip")

    asked = act(client_in, "delete", row)
    done = act(client_in, "delete", row, confirmed="1")

    assert asked.status_code == 200 and "Delete “Trip”?" in asked.content.decode()
    assert f'name="delete" value="{row.pk}"' in asked.content.decode()
    assert done.status_code == 302 and done["Location"] == reverse("chat:conversation_list")
    assert not Conversation.objects.filter(pk=row.pk).exists()


def test_a_conversation_with_a_run_in_progress_is_not_deleted(client_in: Client, user: Any) -> None:
    [row] = made(user, 1)
    Run.objects.create(conversation=row, status=RunStatus.IN_PROGRESS)

    response = act(client_in, "delete", row, confirmed="1", headers=HX)

    assert response.status_code == 409
    assert response.content.decode() == list_actions.RUNNING
    assert Conversation.objects.filter(pk=row.pk).exists()


def test_new_conversation_makes_no_line_until_its_first_message(
    client_in: Client, user: Any
) -> None:
    [older] = made(user, 1, title="")  # an empty one of older data
    made(user, 1, title="Real")

    client_in.post(reverse("chat:conversation_create"))

    new = Conversation.objects.latest("pk")
    html = page(client_in)
    assert new.title == "" and f"conversation-link-{new.pk}" not in html
    assert f"conversation-link-{older.pk}" not in html
    assert "Conversation " not in re.sub(r"<h1.*?</h1>", "", html)
    Message.objects.create(conversation=older, index=0, role="user", content="hi")
    assert f"conversation-link-{older.pk}" in page(client_in)


@pytest.mark.django_db(transaction=True)
def test_a_first_message_gives_the_new_conversation_its_line(client_in: Client, user: Any) -> None:
    made_empty = make.conversation(user)

    make.run_turn(made_empty, "What time is it in Paris?")

    html = page(client_in)
    assert f'id="conversation-link-{made_empty.pk}"' in html
    assert "What time is it in Paris?" in html


def test_the_home_page_opens_the_latest_conversation_of_the_list(
    client_in: Client, user: Any
) -> None:
    listed, archived = made(user, 2, start=noon(1))
    Conversation.objects.filter(pk=archived.pk).update(archived_at=timezone.now())
    client_in.post(reverse("chat:conversation_create"))  # never begun: not in the list

    response = client_in.get(reverse("chat:conversation_list"))

    assert response["Location"] == reverse("chat:conversation_detail", args=[listed.pk])


LINE = re.compile(r'<li(?: class="current")?><a id="conversation-link-\d+"[^>]*>[^<]*</a></li>')


def test_a_line_costs_what_it_shows_and_the_page_has_one_menu(client_in: Client, user: Any) -> None:
    """The list's lines carry no menu of their own: the page has one, hidden, that its script
    puts under a line (static/js/list.js); a pinned line is known by its group."""
    rows = made(user, 3, title="Budget meeting notes {}")
    act(client_in, "pin", rows[2])

    html = page(client_in)

    lines = LINE.findall(html)
    assert len(lines) == 3 and all(len(line) < 100 for line in lines), lines
    assert "line-menu" not in html.partition('id="conversation-results"')[2].partition("</nav>")[0]
    menu = html.partition('<div id="line-menu"')[2].partition("</div>")[0]
    assert ' role="menu"' in menu and " hidden>" in menu
    for do in ("pin", "unpin", "archive", "delete"):
        assert html.count(f'name="{do}"') == 1 and f'name="{do}" value=""' in menu
    assert pinned_links(html) == [rows[2].pk]


def test_without_script_a_conversations_own_page_pins_archives_and_deletes_it(
    client_in: Client, user: Any
) -> None:
    [row] = made(user, 1, title="Trip")
    url = reverse("chat:conversation_detail", args=[row.pk])
    back = {"Referer": f"http://testserver{url}"}

    def manage() -> str:
        return (
            page(client_in, url).partition('<details class="manage">')[2].partition("</details>")[0]
        )

    assert f'name="pin" value="{row.pk}"' in manage() and 'name="archive"' in manage()
    assert f'action="{reverse("chat:conversation_delete", args=[row.pk])}"' in manage()
    pinned = client_in.post(ACT, {"pin": str(row.pk)}, headers=back)
    assert pinned.status_code == 302 and pinned["Location"] == back["Referer"]
    shown = page(client_in, url)
    assert "Pinned “Trip”." in shown and f'name="unpin" value="{row.pk}"' in manage()
    client_in.post(ACT, {"archive": str(row.pk)}, headers=back)
    assert f'name="unarchive" value="{row.pk}"' in manage() and 'name="pin"' in manage()
    # A teammate who reads it shared has none of them.
    Conversation.objects.filter(pk=row.pk).update(shared=True, archived_at=None)
    reader = Client()
    reader.force_login(make.user("bo"))
    assert 'class="line-state"' not in page(reader, url)
