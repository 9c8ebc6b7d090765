"""Sharing with the team: every logged-in user reads a shared conversation; only its owner
writes; unsharing takes it back at once, open sockets included."""

from __future__ import annotations

import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from chat import consumers
from chat.agent.scripted import ScriptedChatClient
from chat.models import Conversation, Message, Run, Version
from chat.testing import factories as make
from chat.testing.sockets import DONE, connect, frames_until, send

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def shared() -> Conversation:
    made = make.conversation(make.user("ada"), "Team notes", enabled_tools=["get_current_time"])
    make.run_turn(made, "what time is it?", ScriptedChatClient())
    make.logged_in(made.owner).post(
        reverse("chat:conversation_share", args=[made.pk]), {"shared": "on"}
    )
    made.refresh_from_db()
    assert made.shared
    return made


def test_a_teammate_reads_a_shared_conversation_and_writes_nothing(shared: Conversation) -> None:
    bob = make.logged_in(make.user("bob"))
    page = bob.get(reverse("chat:conversation_detail", args=[shared.pk]))
    html = page.content.decode()
    assert page.status_code == 200
    assert "Shared with the team by ada" in html and "data-read-only" in html
    assert 'id="composer"' not in html and 'id="stop"' not in html
    run = shared.runs.get()
    call = run.tool_calls.get()
    for name, args in [
        ("run_inspect", [shared.pk, run.pk]),
        ("tool_call_detail", [shared.pk, call.pk]),
        ("message_text", [shared.pk, 0]),
        ("reply_text", [shared.pk, 1]),
        # Forking makes a conversation of the reader's own: this one is not changed.
        ("fork_message", [shared.pk, 0]),
        ("fork_tool_call", [shared.pk, call.pk]),
    ]:
        assert bob.get(reverse(f"chat:{name}", args=args)).status_code == 200, name
    for name, args in [("conversation_settings", [shared.pk])]:
        assert bob.get(reverse(f"chat:{name}", args=args)).status_code == 404, name
    for name in ["conversation_rename", "conversation_delete", "conversation_share"]:
        response = bob.post(reverse(f"chat:{name}", args=[shared.pk]), {"title": "mine"})
        assert response.status_code == 404, name
    shared.refresh_from_db()
    assert (shared.title, shared.shared) == ("Team notes", True)
    # The teammate's own list stays theirs; the shared one is listed apart.
    assert Conversation.objects.for_user(shared.owner).count() == 1
    assert list(Conversation.objects.shared_with(make.user("carol"))) == [shared]
    assert list(Conversation.objects.shared_with(shared.owner)) == []


def test_unshared_conversations_stay_private(shared: Conversation) -> None:
    owner = make.logged_in(shared.owner)
    owner.post(reverse("chat:conversation_share", args=[shared.pk]), {})
    bob = make.logged_in(make.user("bob"))
    assert bob.get(reverse("chat:conversation_detail", args=[shared.pk])).status_code == 404
    assert Client().get(reverse("chat:conversation_detail", args=[shared.pk])).status_code == 302


async def test_a_reader_socket_watches_live_and_is_refused_every_write(
    shared: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chat.runs import lifecycle

    monkeypatch.setattr(lifecycle, "build_client", lambda *_, **__: ScriptedChatClient(["Live."]))
    bob = await database_sync_to_async(make.user)("bob")
    owner = await database_sync_to_async(lambda: shared.owner)()
    reader = await connect(bob, shared)
    writer = await connect(owner, shared)
    before = await Message.objects.filter(conversation=shared).acount()

    for frame in [
        {"action": "send", "message": "let me in"},
        {"action": "cancel"},
        {"action": "edit", "index": 0, "message": "mine now"},
        {"action": "regenerate", "index": 0},
        {"action": "switch", "index": 0, "version": 1},
    ]:
        await reader.send_to(text_data=json.dumps(frame))
        assert consumers.READ_ONLY in await reader.receive_from(timeout=5)
    assert await Message.objects.filter(conversation=shared).acount() == before
    assert not await Version.objects.aexists()

    await send(writer, "and now?")
    seen = "\n".join(await frames_until(reader, DONE))
    assert "and now?" in seen and "Live." in seen
    await writer.disconnect()
    await reader.disconnect()


async def test_unsharing_closes_the_readers_open_socket(shared: Conversation) -> None:
    bob = await database_sync_to_async(make.user)("bob")
    reader = await connect(bob, shared)
    owner = await database_sync_to_async(lambda: shared.owner)()
    writer = await connect(owner, shared)

    url = reverse("chat:conversation_share", args=[shared.pk])
    await database_sync_to_async(lambda: make.logged_in(shared.owner).post(url, {}))()

    assert "The owner stopped sharing this conversation." in await reader.receive_from(timeout=5)
    closed = await reader.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": consumers.CLOSE_NOT_FOUND}
    assert await writer.receive_nothing(timeout=0.2)  # the owner's socket stays
    again = await connect_refused(bob, shared)
    assert again == consumers.CLOSE_NOT_FOUND
    await writer.disconnect()


async def connect_refused(user: Any, conversation: Conversation) -> int:
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator

    from chat.routing import websocket_urlpatterns

    router = URLRouter(websocket_urlpatterns)  # type: ignore[arg-type]
    communicator = WebsocketCommunicator(router, f"/ws/conversations/{conversation.pk}/")
    communicator.scope["user"] = user  # type: ignore[typeddict-unknown-key]
    connected, code = await communicator.connect()
    assert not connected
    return int(code)  # type: ignore[arg-type]


# The header: Share (the owner's, the same rule as the sidebar's form), Copy link, Continue in my
# own copy (a reader's), Download.
def test_the_owner_shares_from_the_header_and_copies_the_link(shared: Conversation) -> None:
    owner = make.logged_in(shared.owner)
    html = owner.get(reverse("chat:conversation_detail", args=[shared.pk])).content.decode()
    header = html.partition('class="chat-header"')[2].partition("</header>")[0]
    share = reverse("chat:conversation_share", args=[shared.pk])
    assert f'action="{share}"' in header and "Stop sharing" in header
    assert "Shared with the team</span></summary>" in header
    assert f'value="http://testserver/c/{shared.pk}/" readonly' in header
    assert "Continue in my own copy" not in header
    for kind in ("markdown", "openai", "full"):
        assert reverse("chat:conversation_download", args=[shared.pk, kind]) in header

    owner.post(share, {})
    html = owner.get(reverse("chat:conversation_detail", args=[shared.pk])).content.decode()
    header = html.partition('class="chat-header"')[2].partition("</header>")[0]
    assert "Share</span></summary>" in header and "Share with the team" in header
    assert "Only you can open it until you share it." in header


def test_a_reader_sees_who_shares_it_and_may_continue_in_a_copy(shared: Conversation) -> None:
    bob = make.logged_in(make.user("bob"))
    html = bob.get(reverse("chat:conversation_detail", args=[shared.pk])).content.decode()
    header = html.partition('class="chat-header"')[2].partition("</header>")[0]
    assert "Shared by ada</span></summary>" in header
    assert reverse("chat:conversation_share", args=[shared.pk]) not in html
    copy = reverse("chat:conversation_copy", args=[shared.pk])
    assert f'action="{copy}"' in header and 'name="before"' not in header
    assert reverse("chat:conversation_download", args=[shared.pk, "markdown"]) in header


def test_continue_in_my_own_copy_forks_for_the_reader_through_what_they_read(
    shared: Conversation,
) -> None:
    bob = make.user("bob")
    web = make.logged_in(bob)
    before = list(shared.messages.active().values_list("index", "content"))
    response = web.post(reverse("chat:conversation_copy", args=[shared.pk]))
    copy = Conversation.objects.get(parent=shared)
    assert response.status_code == 302
    assert response["Location"] == reverse("chat:conversation_detail", args=[copy.pk])
    assert (copy.owner, copy.forked_at, copy.shared) == (bob, before[-1][0], False)
    assert list(copy.messages.active().values_list("index", "content")) == before
    assert list(shared.messages.active().values_list("index", "content")) == before
    page = web.get(response["Location"]).content.decode()
    assert "This is your own copy of “Team notes” through message 3" in page
    assert "Copied from" in page and "shared by ada" in page
    assert 'id="composer"' in page  # theirs to write in


def test_from_an_earlier_window_the_copy_ends_where_the_reader_was(shared: Conversation) -> None:
    """Messages 0-3: a question, a tool call, its result, a reply. Reading up to message 1 (the
    call), the copy takes its whole round: a tool round is never cut in half."""
    bob = make.logged_in(make.user("bob"))
    bob.post(reverse("chat:conversation_copy", args=[shared.pk]), {"before": "2"})
    assert Conversation.objects.get(parent=shared).forked_at == 2
    bob.post(reverse("chat:conversation_copy", args=[shared.pk]), {"before": "1"})
    points = Conversation.objects.filter(parent=shared).order_by("forked_at")
    assert list(points.values_list("forked_at", flat=True)) == [0, 2]


@pytest.mark.parametrize("before", ["-1", "x", "99999999999", ""])
def test_a_bad_reading_point_means_the_latest(shared: Conversation, before: str) -> None:
    make.logged_in(make.user("bob")).post(
        reverse("chat:conversation_copy", args=[shared.pk]), {"before": before}
    )
    assert Conversation.objects.get(parent=shared).forked_at == 3


def test_a_copy_is_refused_where_it_must_be(shared: Conversation) -> None:
    copy = reverse("chat:conversation_copy", args=[shared.pk])
    bob = make.logged_in(make.user("bob"))
    assert bob.get(copy).status_code == 405
    assert Client().post(copy).status_code == 302  # to the login page
    Run.objects.create(conversation=shared, status="in_progress", model="m")
    response = bob.post(copy)
    assert response["Location"] == reverse("chat:conversation_detail", args=[shared.pk])
    said = [str(message) for message in get_messages(response.wsgi_request)]
    assert said == [
        "No copy was made: A run is in progress in this conversation: fork it once it has finished."
    ]
    Conversation.objects.filter(pk=shared.pk).update(shared=False)
    assert bob.post(copy).status_code == 404
    assert not Conversation.objects.filter(parent=shared).exists()


def test_an_empty_shared_conversation_has_nothing_to_copy() -> None:
    empty = make.conversation(make.user("ada"), "Empty")
    Conversation.objects.filter(pk=empty.pk).update(shared=True)
    response = make.logged_in(make.user("bob")).post(
        reverse("chat:conversation_copy", args=[empty.pk])
    )
    said = [str(message) for message in get_messages(response.wsgi_request)]
    assert said == ["No copy was made: this conversation has no messages yet."]


def test_a_reader_forks_from_the_message_they_choose(shared: Conversation) -> None:
    bob = make.logged_in(make.user("bob"))
    url = reverse("chat:fork_message", args=[shared.pk, 0])
    page = bob.get(url).content.decode()
    assert reverse("chat:conversation_rename", args=[shared.pk]) not in page  # not theirs
    response = bob.post(url)
    copy = Conversation.objects.get(parent=shared)
    assert response["Location"] == reverse("chat:conversation_detail", args=[copy.pk])
    assert (copy.owner.get_username(), copy.forked_at, copy.messages.count()) == ("bob", 0, 1)
