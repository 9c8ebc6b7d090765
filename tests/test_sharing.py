"""Sharing with the team: every logged-in user reads a shared conversation; only its owner
writes; unsharing takes it back at once, open sockets included."""

from __future__ import annotations

import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import Client
from django.urls import reverse

from chat import consumers
from chat.agent.scripted import ScriptedChatClient
from chat.models import Conversation, Message, Version
from chat.testing import factories as make
from chat.testing.sockets import DONE, connect, frames_until, send

pytestmark = pytest.mark.django_db(transaction=True)


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def shared() -> Conversation:
    made = make.conversation(make.user("ada"), "Team notes", enabled_tools=["get_current_time"])
    make.run_turn(made, "what time is it?", ScriptedChatClient())
    logged_in(made.owner).post(reverse("chat:conversation_share", args=[made.pk]), {"shared": "on"})
    made.refresh_from_db()
    assert made.shared
    return made


def test_a_teammate_reads_a_shared_conversation_and_writes_nothing(shared: Conversation) -> None:
    bob = logged_in(make.user("bob"))
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
    ]:
        assert bob.get(reverse(f"chat:{name}", args=args)).status_code == 200, name
    for name, args in [
        ("conversation_settings", [shared.pk]),
        ("fork_message", [shared.pk, 0]),
        ("fork_tool_call", [shared.pk, call.pk]),
    ]:
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
    owner = logged_in(shared.owner)
    owner.post(reverse("chat:conversation_share", args=[shared.pk]), {})
    bob = logged_in(make.user("bob"))
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
    await database_sync_to_async(lambda: logged_in(shared.owner).post(url, {}))()

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
