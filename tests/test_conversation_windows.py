"""A conversation page a window at a time (chat/windows.py, chat.turns.Window): the latest turns,
the earlier windows in place, a link into an old message, live replies and versions across
windows, and a page that costs the same whatever the conversation's length."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test import AsyncClient, Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from chat import agent, transcripts
from chat.agent.scripted import ScriptedChatClient
from chat.models import Conversation, Message, ModelCall, Run, ToolCall
from chat.runs import lifecycle
from chat.testing import factories as make
from chat.testing.sockets import DONE, connect, frames_until, send, streamed_text
from chat.transcripts import versions
from chat.turns import WINDOW

pytestmark = pytest.mark.django_db
HX = {"HX-Request": "true"}
NOW = '{"iso": "now"}'
EARLIER = re.compile(r'<input type="hidden" name="before" value="(\d+)">')


def long_conversation(owner: Any, messages: int, title: str = "long") -> Conversation:
    """A conversation of about `messages` rows made in bulk: turns of a question, one to three
    tool rounds (an assistant asking, the tool's reply, each call logged) and an answer, each
    turn its own run with a model call per step."""
    made = make.conversation(owner, title, enabled_tools=["get_current_time"])
    plans: list[int] = []
    total = 0
    while total < messages:
        rounds = 1 + len(plans) % 3
        plans.append(rounds)
        total += 2 + 2 * rounds
    runs = Run.objects.bulk_create(
        Run(conversation=made, status="completed", model="m-long", total_tokens=10) for _ in plans
    )
    rows: list[Message] = []
    logs: list[ToolCall] = []
    calls: list[ModelCall] = []
    for number, (run, rounds) in enumerate(zip(runs, plans, strict=True)):
        turn: list[agent.ChatMessage] = [
            agent.ChatMessage(role="user", content=f"question {number}")
        ]
        asked: list[agent.ToolCall] = []
        for step in range(rounds):
            call = make.call(f"call_{number}_{step}", "get_current_time", '{"timezone": "UTC"}')
            asked.append(call)
            turn.append(agent.ChatMessage(role="assistant", content=None, tool_calls=(call,)))
            turn.append(
                agent.ChatMessage(role="tool", tool_call_id=call.id, content='{"iso": "now"}')
            )
        turn.append(agent.ChatMessage(role="assistant", content=f"answer {number}"))
        made_rows = [
            Message(conversation=made, run=run, index=len(rows) + offset, **fields)
            for offset, fields in enumerate(map(transcripts.message_fields, turn))
        ]
        rows += made_rows
        askers = [row for row in made_rows if row.role == "assistant" and row.tool_calls]
        logs += [
            make.tool_log(run, row, call, NOW, step=step + 1)
            for step, (row, call) in enumerate(zip(askers, asked, strict=True))
        ]
        calls += [ModelCall(run=run, step=step + 1, model="m-long") for step in range(rounds + 1)]
    Message.objects.bulk_create(rows)
    ToolCall.objects.bulk_create(logs)
    ModelCall.objects.bulk_create(calls)
    return made


def indexes(html: str) -> list[int]:
    """The message indexes a page or a window shows, in order."""
    return [int(n) for n in re.findall(r'id="message-(\d+)"', html)]


def user_indexes(made: Conversation) -> set[int]:
    return set(made.messages.filter(role="user").values_list("index", flat=True))


def question_from(made: Conversation, index: int) -> int:
    """The index of the first question at or after message `index`."""
    return min(n for n in user_indexes(made) if n >= index)


def earlier(html: str) -> int | None:
    found = EARLIER.findall(html)
    return int(found[0]) if found else None


def window_url(made: Conversation, before: int) -> str:
    return reverse("chat:conversation_window", args=[made.pk]) + f"?before={before}"


@pytest.fixture
def long(user: Any) -> Conversation:
    return long_conversation(user, 400)


def test_the_page_shows_the_latest_turns_and_a_button_for_the_earlier_ones(
    client_in: Client, long: Conversation
) -> None:
    html = client_in.get(reverse("chat:conversation_detail", args=[long.pk])).content.decode()

    shown = indexes(html)
    last = long.messages.count() - 1
    assert shown[-1] == last and shown == list(range(shown[0], last + 1))
    assert shown[0] in user_indexes(long)  # it starts at a turn's question
    assert WINDOW - 8 <= len(shown) <= WINDOW
    assert earlier(html) == shown[0]
    assert "Show earlier messages</button>" in html
    assert f"question {len(user_indexes(long)) - 1}" in html and "question 0<" not in html


def test_earlier_windows_bring_every_message_once_and_never_split_a_turn(
    client_in: Client, long: Conversation
) -> None:
    html = client_in.get(reverse("chat:conversation_detail", args=[long.pk])).content.decode()
    seen = indexes(html)
    starts = user_indexes(long)
    windows = 0
    while (before := earlier(html)) is not None:
        response = client_in.get(window_url(long, before), headers=HX)
        assert response.status_code == 200
        html = response.content.decode()
        shown = indexes(html)
        assert shown[0] in starts, "a window starts at a question"
        assert shown == list(range(shown[0], before)), "it ends where the later one starts"
        assert len(shown) <= WINDOW
        assert f"Messages {shown[0]} to {before - 1} shown above." in html  # announced
        seen = shown + seen
        windows += 1
    assert seen == list(range(long.messages.count()))
    assert windows >= 400 // WINDOW - 1
    assert 'hx-swap-oob="true"' in html and html.count("hx-swap-oob") == 1  # the announcement


def test_a_turn_longer_than_a_window_is_shown_whole(client_in: Client, user: Any) -> None:
    made = long_conversation(user, 60)
    question = made.messages.filter(role="user").order_by("-index").first()
    assert question is not None
    run = question.run
    tail = [
        Message(
            conversation=made,
            run=run,
            index=made.messages.count() + n,
            role="assistant",
            content=f"part {n}",
        )
        for n in range(WINDOW + 10)
    ]
    Message.objects.bulk_create(tail)

    html = client_in.get(reverse("chat:conversation_detail", args=[made.pk])).content.decode()

    shown = indexes(html)
    assert shown[0] == question.index and shown[-1] == tail[-1].index
    assert earlier(html) == question.index


def test_a_link_into_an_old_message_opens_the_window_that_holds_it(
    client_in: Client, long: Conversation
) -> None:
    target = 123
    url = reverse("chat:conversation_detail", args=[long.pk])
    html = client_in.get(f"{url}?at={target}").content.decode()

    shown = indexes(html)
    assert target in shown and shown[0] in user_indexes(long) and shown[0] <= target
    assert len(shown) <= WINDOW + 8
    later = shown[-1] + 1
    assert f'href="{url}?at={later}#message-{later}">Show later messages</a>' in html
    assert f'href="{url}">Jump to latest</a>' in html
    assert earlier(html) == shown[0]
    # Live frames swap into #transcript: here a hidden sink after the window, not the window.
    assert '<div id="transcript" class="live-sink" hidden></div>' in html
    assert 'id="transcript-window"' in html
    assert 'class="live-elsewhere">' in html  # nothing is streaming: the note stays hidden

    latest = client_in.get(url).content.decode()
    linked = client_in.get(f"{url}?at={indexes(latest)[1]}").content.decode()
    assert indexes(linked) == indexes(latest) and 'class="live-sink"' not in linked
    # Following "Show later messages" to the end reaches the latest window.
    while match := re.search(r'href="([^"]+)#message-\d+">Show later messages', html):
        html = client_in.get(match.group(1).replace("&amp;", "&")).content.decode()
    assert indexes(html)[-1] == long.messages.count() - 1
    assert '<div id="transcript" class="transcript"' in html


def test_a_runs_link_and_a_window_without_script(client_in: Client, long: Conversation) -> None:
    url = reverse("chat:conversation_detail", args=[long.pk])
    run = Run.objects.get(messages__index=40)
    html = client_in.get(f"{url}?run={run.pk}").content.decode()
    assert f'id="turn-{run.pk}"' in html

    latest = client_in.get(url).content.decode()
    before = earlier(latest)
    assert before is not None
    page = client_in.get(f"{url}?before={before}").content.decode()
    assert indexes(page)[-1] == before - 1 and "Show later messages" in page


def test_another_user_gets_404_and_a_teammate_reads_a_shared_ones_windows(
    client: Client, long: Conversation
) -> None:
    client.force_login(make.user("eve"))
    url = reverse("chat:conversation_detail", args=[long.pk])
    assert client.get(window_url(long, 200), headers=HX).status_code == 404
    assert client.get(f"{url}?at=10").status_code == 404

    long.shared = True
    long.save(update_fields=["shared"])
    response = client.get(window_url(long, 200), headers=HX)
    assert response.status_code == 200 and indexes(response.content.decode())[-1] == 199
    page = client.get(f"{url}?at=10").content.decode()
    assert 10 in indexes(page) and 'id="composer"' not in page and "read-only" in page


def test_a_window_needs_its_index(client_in: Client, long: Conversation) -> None:
    url = reverse("chat:conversation_window", args=[long.pk])
    assert client_in.get(url, headers=HX).status_code == 404
    assert client_in.get(url + "?before=x", headers=HX).status_code == 404


def _page(client: Client, made: Conversation) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("chat:conversation_detail", args=[made.pk]))
    assert response.status_code == 200
    return len(queries), len(response.content)


def _window(client: Client, made: Conversation, before: int) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(window_url(made, before), headers=HX)
    assert response.status_code == 200
    return len(queries), len(response.content)


def test_a_page_of_a_3300_message_conversation_costs_what_a_100_message_one_does(
    client_in: Client, user: Any
) -> None:
    short = long_conversation(user, 100, "short")
    huge = long_conversation(user, 3_300, "huge")
    assert huge.messages.count() >= 3_300
    _page(client_in, huge)  # warm the template and the session

    short_queries, short_bytes = _page(client_in, short)
    huge_queries, huge_bytes = _page(client_in, huge)

    assert huge_queries == short_queries
    assert huge_bytes < 500_000
    assert abs(huge_bytes - short_bytes) < 0.2 * short_bytes
    assert _window(client_in, huge, 1_600)[0] == _window(client_in, short, 60)[0]


def test_versions_of_a_turn_in_an_earlier_window(client_in: Client, long: Conversation) -> None:
    """A turn far back with two versions shows its switcher in its window, numbered from that
    window's rows alone; switching to the short version makes it part of the latest window."""
    at = question_from(long, 120)
    archived = versions.archive_from(long, at)
    Message.objects.create(conversation=long, index=at, role="user", content="asked again")
    Message.objects.create(conversation=long, index=at + 1, role="assistant", content="new answer")
    assert versions.switch(long, at, archived.number)  # back to the long path

    html = client_in.get(reverse("chat:conversation_detail", args=[long.pk])).content.decode()
    assert "version 1 of 2" not in html and "version 2 of 2" not in html
    while at not in indexes(html):
        before = earlier(html)
        assert before is not None
        html = client_in.get(window_url(long, before), headers=HX).content.decode()
    assert "version 1 of 2" in html
    assert f'"action": "switch", "index": {at}, "version": 2' in html

    assert versions.switch(long, at, 2)
    latest = client_in.get(reverse("chat:conversation_detail", args=[long.pk])).content.decode()
    assert "asked again" in latest and "version 2 of 2" in latest
    assert indexes(latest)[-1] == at + 1


def test_points_read_the_window_alone(long: Conversation) -> None:
    made = [question_from(long, n) for n in (8, 200, 380)]
    for index in made:
        versions.archive_from(long, index)
        versions.switch(long, index, 1)
    assert set(versions.points(long)) == set(made)
    assert set(versions.points(long, 100, 300)) == {made[1]}
    assert set(versions.points(long, 300)) == {made[2]}


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], None]:
    """Runs of the test answer with these scripted replies, in turn."""

    def use(replies: list[str]) -> None:
        client = ScriptedChatClient(replies)
        monkeypatch.setattr(lifecycle, "build_client", lambda *_, **__: client)

    return use


async def _get(client: AsyncClient, url: str) -> str:
    response = await client.get(url, headers=HX)
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.django_db(transaction=True)
async def test_a_live_reply_while_an_earlier_window_is_loaded(
    scripted: Callable[[list[str]], None],
) -> None:
    owner = await database_sync_to_async(make.user)()
    made = await database_sync_to_async(long_conversation)(owner, 400)
    client = AsyncClient()
    await client.aforce_login(owner)
    page_url = reverse("chat:conversation_detail", args=[made.pk])
    before = earlier(await _get(client, page_url))
    assert before is not None
    loaded = indexes(await _get(client, window_url(made, before)))
    old = await _get(client, f"{page_url}?at=30")

    scripted(["the streamed answer"])
    socket = await connect(owner, made)
    await send(socket, "a question at the end")
    frames = await frames_until(socket, DONE)
    await socket.disconnect()

    opening = next(f for f in frames if 'id="transcript" hx-swap-oob="beforeend"' in f)
    assert "a question at the end" in opening
    assert not any('id="transcript" hx-swap-oob="innerHTML"' in f for f in frames)  # windows stay
    assert "the streamed answer" in streamed_text(frames) + frames[-1]
    # The window loaded above is the same rows after the reply; the latest page ends with it.
    assert indexes(await _get(client, window_url(made, before))) == loaded
    latest = await _get(client, page_url)
    assert "a question at the end" in latest and indexes(latest)[-1] == 401
    # A page showing an old window takes the same frames into its hidden sink, not the window.
    sink = old.index('<div id="transcript" class="live-sink" hidden></div>')
    assert sink < old.index('id="transcript-window"') < old.index(f'id="message-{indexes(old)[0]}"')


@pytest.mark.django_db(transaction=True)
async def test_edit_and_switch_a_turn_of_an_earlier_window_over_the_socket(
    scripted: Callable[[list[str]], None],
) -> None:
    owner = await database_sync_to_async(make.user)()
    made = await database_sync_to_async(long_conversation)(owner, 400)
    at = await database_sync_to_async(question_from)(made, 150)
    client = AsyncClient()
    await client.aforce_login(owner)
    page_url = reverse("chat:conversation_detail", args=[made.pk])

    scripted(["the edited answer"])
    socket = await connect(owner, made)
    frame = {"action": "edit", "index": str(at), "message": "asked differently"}
    await socket.send_to(text_data=json.dumps(frame))
    frames = await frames_until(socket, DONE)
    opening = next(f for f in frames if 'id="transcript" hx-swap-oob="innerHTML"' in f)
    # The new path ends at the edit: its latest window holds the edited turn, and its start.
    assert f'id="message-{at}"' in opening and "asked differently" in opening
    assert "Show earlier messages" in opening and len(opening) < 200_000
    assert "version 2 of 2" in frames[-1]

    await socket.send_to(text_data=json.dumps({"action": "switch", "index": at, "version": 1}))
    shown = (await frames_until(socket, 'hx-swap-oob="innerHTML"'))[-1]
    await socket.disconnect()
    # Back on the long path, the latest window no longer holds message `at`: the page that
    # switched opens ?at= (chat.js), where the turn shows its first version.
    assert f'id="message-{at}"' not in shown and indexes(shown)[-1] == 399
    there = await _get(client, f"{page_url}?at={at}")
    assert f'id="message-{at}"' in there and "version 1 of 2" in there
