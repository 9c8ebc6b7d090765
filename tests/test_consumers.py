from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

from agentlab_site.asgi import application
from chat import agent, runs
from chat.agent.errors import ProviderHTTPError
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.fragments import FRAGMENT
from chat.models import Conversation, Message, Run, Version
from chat.routing import websocket_urlpatterns
from chat.runs import lifecycle
from chat.testing import factories as make
from chat.testing.sockets import DONE, STREAMED, connect, frames_until, send, streamed_text

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = (b"origin", b"http://localhost")


@database_sync_to_async
def make_user(name: str = "ada") -> Any:
    return get_user_model().objects.create_user(name, password="pw-123456789")


make_conversation = database_sync_to_async(make.new_conversation)


@pytest.fixture
def use_client(monkeypatch: pytest.MonkeyPatch) -> Callable[[ScriptedChatClient], None]:
    def use(client: ScriptedChatClient) -> None:
        monkeypatch.setattr(lifecycle, "build_client", lambda *_, **__: client)

    return use


OpenSocket = Callable[[ScriptedChatClient], Awaitable[WebsocketCommunicator]]


@pytest.fixture
def open_socket(use_client: Callable[[ScriptedChatClient], None]) -> OpenSocket:
    """A socket of a new user on a new conversation, whose runs use the given client."""

    async def open_with(client: ScriptedChatClient) -> WebsocketCommunicator:
        use_client(client)
        user = await make_user()
        return await connect(user, await make_conversation(user))

    return open_with


async def test_a_run_streams_indicator_pills_and_final_reply(open_socket: OpenSocket) -> None:
    ws = await open_socket(ScriptedChatClient())

    await send(ws, "What time is it? Search the cards for pills too")
    frames = await frames_until(ws, DONE)
    everything = "\n".join(frames)

    first = next(f for f in frames if 'id="transcript" hx-swap-oob="beforeend"' in f)
    assert "What time is it? Search the cards for pills too" in first
    assert 'data-running="true"' in first
    assert '<textarea id="message"' in first and "disabled" in first  # the sender's box emptied
    said = re.sub(r"<[^>]+>", "", everything)
    assert re.search(r"Looking up: Get current time · \d+ s, Search cards · \d+ s", said)
    indicator_frames = [f for f in frames if 'id="indicator-' in f]
    assert "Looking up" not in indicator_frames[-1]
    final = frames[-1]
    assert 'class="pill pill-completed"' in final
    assert "Get current time" in final and "Search cards" in final
    assert "Here is what the tools said" in final and "<li>" in final
    await ws.disconnect()


async def test_a_reply_without_tools_has_no_pill_row(open_socket: OpenSocket) -> None:
    ws = await open_socket(ScriptedChatClient(["Just **text**."]))
    await send(ws, "hello")
    final = (await frames_until(ws, DONE))[-1]
    assert "<strong>text</strong>" in final
    assert 'class="pills"' not in final
    await ws.disconnect()


async def test_deltas_are_coalesced_and_escaped(open_socket: OpenSocket) -> None:
    reply = "<b>tag</b> " + " ".join(f"w{i}" for i in range(3000))
    ws = await open_socket(ScriptedChatClient([reply]))
    await send(ws, "talk a lot")
    frames = await frames_until(ws, DONE, wait=10)

    assert len(frames) < 40, len(frames)
    streamed = streamed_text(frames)
    assert streamed.startswith("&lt;b&gt;tag&lt;/b&gt; w0 w1")
    assert streamed.endswith("w2999")
    assert "<b>tag</b>" not in "".join(frames)
    assert "&lt;b&gt;tag&lt;/b&gt;" in frames[-1]
    await ws.disconnect()


async def test_provider_error_shows_status_and_message(open_socket: OpenSocket) -> None:
    error = ProviderHTTPError("Rate limit reached for gpt-x", status_code=429)
    ws = await open_socket(ScriptedChatClient([ScriptedTurn("partial ", error=error)]))
    await send(ws, "hi")
    final = (await frames_until(ws, DONE))[-1]
    assert "HTTP 429: Rate limit reached for gpt-x" in final
    assert "partial" in final and "Failed" in final
    await ws.disconnect()


async def test_stop_cancels_and_the_next_message_works(
    open_socket: OpenSocket, use_client: Any
) -> None:
    ws = await open_socket(ScriptedChatClient([" ".join(["slow"] * 500)], delay=0.01))
    await send(ws, "go")
    await frames_until(ws, STREAMED)
    await ws.send_to(text_data=json.dumps({"action": "cancel"}))
    final = (await frames_until(ws, DONE))[-1]
    assert "Cancelled by the user" in final

    run = await Run.objects.aget()
    assert run.status == "cancelled"
    use_client(ScriptedChatClient(["again"]))
    await send(ws, "next")
    final = (await frames_until(ws, DONE))[-1]
    assert "again" in final
    await ws.disconnect()


async def test_second_send_while_running_is_refused_and_writes_nothing(
    open_socket: OpenSocket,
) -> None:
    ws = await open_socket(ScriptedChatClient([" ".join(["slow"] * 300)], delay=0.01))
    await send(ws, "first")
    await frames_until(ws, STREAMED)
    await send(ws, "second")
    notice = await frames_until(ws, 'id="notice"')
    assert "already in progress" in notice[-1]
    assert await Message.objects.filter(content="second").acount() == 0
    await ws.send_to(text_data=json.dumps({"action": "cancel"}))
    await frames_until(ws, DONE)
    await ws.disconnect()


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"action": "dance"}', "Unknown action"),
        ('{"action": "send"}', "needs a message"),
        ('{"action": "send", "message": 42}', "needs a message"),
        ('{"action": "send", "message": "   "}', "empty"),
    ],
)
async def test_malformed_frames_get_a_clear_notice(frame: str, expected: str) -> None:
    user = await make_user()
    conversation = await make_conversation(user)
    ws = await connect(user, conversation)
    await ws.send_to(text_data=frame)
    reply = await ws.receive_from(timeout=5)
    assert 'id="notice"' in reply and expected in reply
    assert await Run.objects.acount() == 0
    await ws.disconnect()


async def test_binary_and_oversized_frames_are_refused(settings: Any) -> None:
    settings.AGENTLAB_MAX_MESSAGE_CHARS = 100
    user = await make_user()
    conversation = await make_conversation(user)
    ws = await connect(user, conversation)
    await ws.send_to(bytes_data=b"\x00\x01")
    assert "Binary frames" in await ws.receive_from(timeout=5)
    await send(ws, "x" * 101)
    assert "too long" in await ws.receive_from(timeout=5)
    assert await Message.objects.acount() == 0
    await ws.disconnect()


async def test_user_input_is_escaped(open_socket: OpenSocket) -> None:
    ws = await open_socket(ScriptedChatClient(["ok"]))
    await send(ws, '<img src=x onerror="alert(1)">')
    frames = await frames_until(ws, DONE)
    assert "<img" not in "".join(frames)
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in "".join(frames)
    await ws.disconnect()


async def test_two_sockets_on_one_conversation_both_see_the_stream(use_client: Any) -> None:
    user = await make_user()
    conversation = await make_conversation(user)
    use_client(ScriptedChatClient(["shared reply"]))
    first = await connect(user, conversation)
    second = await connect(user, conversation)
    await send(first, "hi")
    seen = {}
    for ws in (first, second):
        frames = await frames_until(ws, DONE)
        assert "shared reply" in frames[-1]
        seen[ws] = "".join(frames)
        await ws.disconnect()
    # Only the sender's composer is emptied; the other tab keeps what it typed.
    assert '<textarea id="message"' in seen[first]
    assert '<textarea id="message"' not in seen[second]


async def test_reconnect_mid_run_catches_up(use_client: Any) -> None:
    user = await make_user()
    conversation = await make_conversation(user)
    words = [f"w{i}" for i in range(200)]
    use_client(ScriptedChatClient([" ".join(words)], delay=0.005))
    ws = await connect(user, conversation)
    await send(ws, "go")
    await frames_until(ws, STREAMED)
    await ws.disconnect()
    await asyncio.sleep(0.1)

    late = await connect(user, conversation)
    frames = await frames_until(late, DONE)
    # The socket joins the group before the run renders its snapshot: a frame published in
    # between may come first. The snapshot holds its text and replaces the reply, so the
    # reader sees every word once.
    at = next(n for n, frame in enumerate(frames) if "message assistant streaming" in frame)
    snapshot = frames[at]
    assert 'hx-swap-oob="true"' in snapshot
    caught_up = re.search(r'id="reply-\d+-text">(.*?)</div>', snapshot, re.S)
    assert caught_up and caught_up.group(1).startswith("w0 w1")
    assert streamed_text(frames[:at]) in caught_up.group(1)
    assembled = caught_up.group(1) + streamed_text(frames[at + 1 :])
    assert assembled == " ".join(words)
    await late.disconnect()


async def test_closing_the_socket_does_not_stop_the_run(open_socket: OpenSocket) -> None:
    ws = await open_socket(ScriptedChatClient(["a b c d e f g h"], delay=0.02))
    await send(ws, "go")
    await frames_until(ws, 'data-running="true"')
    await ws.disconnect()
    for _ in range(100):
        run = await Run.objects.aget()
        if run.status != "in_progress":
            break
        await asyncio.sleep(0.05)
    assert run.status == "completed"
    assert await Message.objects.filter(content="a b c d e f g h").aexists()


async def test_anonymous_and_foreign_sockets_are_closed() -> None:
    owner = await make_user("owner")
    other = await make_user("mallory")
    conversation = await make_conversation(owner)

    anonymous = WebsocketCommunicator(
        application, f"/ws/conversations/{conversation.pk}/", headers=[ORIGIN]
    )
    connected, _ = await anonymous.connect()
    assert not connected

    foreign = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/conversations/{conversation.pk}/"
    )
    foreign.scope["user"] = other
    connected, code = await foreign.connect()
    assert not connected and code == 4404


async def test_session_login_and_origin_check_through_the_asgi_app() -> None:
    user = await make_user()
    conversation = await make_conversation(user)
    client = Client()
    await database_sync_to_async(client.force_login)(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    path = f"/ws/conversations/{conversation.pk}/"

    good = WebsocketCommunicator(application, path, headers=[ORIGIN, (b"cookie", cookie)])
    connected, _ = await good.connect()
    assert connected
    await good.disconnect()

    evil = WebsocketCommunicator(
        application, path, headers=[(b"origin", b"http://evil.example"), (b"cookie", cookie)]
    )
    connected, _ = await evil.connect()
    assert not connected


def test_agent_package_has_no_django_imports() -> None:
    import ast
    import pathlib

    for path in pathlib.Path(agent.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [alias.name for alias in node.names]
                )
                assert not any(name.split(".")[0] in {"django", "channels"} for name in names), path


async def test_a_flood_of_frames_is_refused_then_cut_off(settings: Any) -> None:
    settings.AGENTLAB_WS_BURST = 5
    settings.AGENTLAB_WS_FRAMES_PER_SECOND = 0.5
    user = await make_user()
    conversation = await make_conversation(user)
    ws = await connect(user, conversation)
    for _ in range(5):
        await ws.send_to(text_data='{"action": "dance"}')
        assert "Unknown action" in await ws.receive_from(timeout=5)
    await ws.send_to(text_data='{"action": "dance"}')
    assert "Too many frames: slow down" in await ws.receive_from(timeout=5)
    for _ in range(14):
        await ws.send_to(text_data='{"action": "send", "message": "spam"}')
    assert "connection is closed" in await ws.receive_from(timeout=5)
    assert (await ws.receive_output(timeout=5))["type"] == "websocket.close"
    assert await Run.objects.acount() == 0


async def test_a_frame_naming_another_conversation_is_refused(use_client: Any) -> None:
    user = await make_user()
    mine = await make_conversation(user)
    theirs = await make_conversation(await make_user("mallory"))
    ws = await connect(user, mine)
    frame = {"action": "send", "message": "hi", "conversation": theirs.pk}
    await ws.send_to(text_data=json.dumps(frame))
    assert f"belongs to conversation {mine.pk}" in await ws.receive_from(timeout=5)
    assert await Message.objects.acount() == 0
    await ws.disconnect()


async def test_stop_twice_and_stop_after_the_end_are_harmless(open_socket: OpenSocket) -> None:
    ws = await open_socket(ScriptedChatClient([" ".join(["slow"] * 300)], delay=0.01))
    await send(ws, "go")
    await frames_until(ws, STREAMED)
    cancel = json.dumps({"action": "cancel"})
    await ws.send_to(text_data=cancel)
    await ws.send_to(text_data=cancel)
    final = (await frames_until(ws, DONE))[-1]
    assert "Cancelled by the user" in final
    await ws.send_to(text_data=cancel)
    assert await ws.receive_nothing(timeout=0.3)
    run = await Run.objects.aget()
    assert run.status == "cancelled"
    assert await Message.objects.filter(role="assistant").acount() == 1
    await ws.disconnect()


async def test_double_submit_starts_one_run(open_socket: OpenSocket) -> None:
    ws = await open_socket(ScriptedChatClient(["one reply"], delay=0.01))
    await send(ws, "same message")
    await send(ws, "same message")
    frames = await frames_until(ws, DONE)
    assert any("already in progress" in f for f in frames) or await Run.objects.acount() == 1
    assert await Run.objects.acount() == 1
    assert await Message.objects.filter(role="user").acount() == 1
    await ws.disconnect()


async def test_a_page_that_showed_a_run_live_gets_the_final_reply_if_it_ended_meanwhile(
    use_client: Any,
) -> None:
    user = await make_user()
    conversation = await make_conversation(user)
    run = await (
        await runs.start_run(
            conversation=conversation,
            user=user,
            content="hi",
            client=ScriptedChatClient(["all done"]),
        )
    ).task
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/conversations/{conversation.pk}/?live={run.pk}"
    )
    communicator.scope["user"] = user
    assert (await communicator.connect())[0]
    frame = await communicator.receive_from(timeout=5)
    assert f'id="reply-{run.pk}"' in frame and "all done" in frame and DONE in frame
    await communicator.disconnect()


async def test_a_frame_for_a_socket_that_just_closed_is_dropped_quietly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from autobahn.exception import Disconnected

    from chat.consumers import ChatConsumer

    user = await make_user()
    conversation = await make_conversation(user)
    consumer = ChatConsumer()
    consumer.conversation = conversation
    consumer.channel_name = "specific.x!y"

    attempts: list[object] = []

    async def closed(**frame: object) -> None:
        attempts.append(frame["text_data"])
        raise Disconnected("Attempt to send on a closed protocol")

    monkeypatch.setattr(consumer, "send", closed)
    with caplog.at_level("DEBUG", logger="chat.consumers"):
        await consumer.fragment({"type": FRAGMENT, "html": "<p>late</p>"})

    assert attempts == ["<p>late</p>"]  # it was tried, and the error did not escape
    assert "a frame for a closed socket" in caplog.text
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING")]


async def test_edit_regenerate_and_switch_reach_every_tab(use_client: Any) -> None:
    use_client(ScriptedChatClient(["first answer"]))
    user = await make_user()
    conversation = await make_conversation(user)
    ws, other = await connect(user, conversation), await connect(user, conversation)
    await send(ws, "first question")
    await frames_until(ws, DONE)
    await frames_until(other, DONE)

    use_client(ScriptedChatClient(["edited answer"]))
    await ws.send_to(text_data=json.dumps({"action": "edit", "index": "0", "message": "edited"}))
    frames = await frames_until(ws, DONE)
    opening = next(f for f in frames if 'id="transcript" hx-swap-oob="innerHTML"' in f)
    assert 'class="bubble">edited<' in opening and 'bubble">first question' not in opening
    assert "version 2 of 2" in frames[-1] and "edited answer" in frames[-1]
    seen = "\n".join(await frames_until(other, DONE))
    assert 'hx-swap-oob="innerHTML"' in seen and 'bubble">first question' not in seen

    await ws.send_to(text_data=json.dumps({"action": "switch", "index": 0, "version": 1}))
    for socket in (ws, other):
        shown = (await frames_until(socket, 'hx-swap-oob="innerHTML"'))[-1]
        assert "first question" in shown and "first answer" in shown
        assert "edited answer" not in shown and "version 1 of 2" in shown

    use_client(ScriptedChatClient(["third answer"]))
    await ws.send_to(text_data=json.dumps({"action": "regenerate", "index": 0}))
    final = (await frames_until(ws, DONE))[-1]
    assert "third answer" in final and "version 3 of 3" in final
    history = await make.ahistory(conversation)
    assert [m.content for m in history] == ["first question", "third answer"]
    await ws.disconnect()
    await other.disconnect()


@pytest.mark.parametrize(
    ("frame", "notice"),
    [
        ({"action": "edit", "message": "x"}, "A edit frame needs the index of a message."),
        ({"action": "edit", "index": "1", "message": "x"}, "Message 1 is not a user message"),
        ({"action": "edit", "index": 0}, "A send frame needs a message (a string)."),
        ({"action": "regenerate", "index": "-1"}, "A regenerate frame needs the index"),
        ({"action": "switch", "index": 0, "version": 2}, "There is no version 2 at message 0."),
        ({"action": "switch", "index": 0}, "A switch frame needs the index of a message and"),
    ],
)
async def test_version_frames_that_cannot_be_done_say_why(
    open_socket: OpenSocket, frame: dict[str, Any], notice: str
) -> None:
    ws = await open_socket(ScriptedChatClient(["answer"]))
    await send(ws, "question")
    await frames_until(ws, DONE)
    await ws.send_to(text_data=json.dumps(frame))
    shown = await ws.receive_from(timeout=5)
    assert 'id="notice"' in shown and notice in shown
    stored = await make.ahistory(await Conversation.objects.aget())
    assert [m.content for m in stored] == ["question", "answer"]
    assert not await Version.objects.aexists()
    await ws.disconnect()
