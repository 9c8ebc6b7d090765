"""Tool calls that wait for a person, over the conversation's socket: the waiting card reaches
every tab, decisions are frames (approve, deny, edit, always, all at once), refusals are one
line for the socket that sent them, Stop ends a waiting run, and the owner's other pages mark
the conversation in their sidebar."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.urls import reverse

from chat.models import Conversation, Run, ToolCall
from chat.routing import websocket_urlpatterns
from chat.testing import factories as make
from chat.testing.sockets import DONE, connect, frames_until, send

pytestmark = pytest.mark.django_db(transaction=True)

WAITING = 'data-waiting="Handoff note"'
"""In the frame of a run that has just started waiting for a decision on its handoff note."""
NOTE = "Please leave a handoff note: deploy at noon"


@sync
def handoff_conversation(name: str = "ada", *tools: str, **parameters: Any) -> Conversation:
    """A conversation whose scripted model calls the handoff note when asked; the tool asks
    first (it writes)."""
    enabled = list(tools or ["handoff_note"])
    return make.conversation(make.user(name), "Deploy", enabled_tools=enabled, **parameters)


async def owner_of(made: Conversation) -> Any:
    return await sync(lambda: made.owner)()


async def waiting_run(made: Conversation, *sockets: WebsocketCommunicator) -> tuple[Run, str]:
    """Ask for a handoff note from the first socket; every socket gets the waiting card. The run
    and the card's frame (of the first socket)."""
    await send(sockets[0], NOTE)
    frames = [await frames_until(ws, WAITING) for ws in sockets]
    run = await Run.objects.aget(conversation=made)
    assert run.status == "requires_action"
    return run, frames[0][-1]


def decide(run: Run, verdict: str, call: ToolCall | None = None, **extra: Any) -> str:
    frame = {"action": "decide", "run": run.pk, "verdict": verdict, **extra}
    if call is not None:
        frame["call"] = str(call.pk)  # as a form sends it
    return json.dumps(frame)


async def notice(ws: WebsocketCommunicator) -> str:
    return (await frames_until(ws, 'id="notice"'))[-1]


async def test_the_card_reaches_every_tab_and_approving_runs_the_tool() -> None:
    made = await handoff_conversation()
    owner = await owner_of(made)
    other = await sync(make.conversation)(owner, "Elsewhere")
    ws, tab, elsewhere = (
        await connect(owner, made),
        await connect(owner, made),
        await connect(owner, other),
    )

    run, card = await waiting_run(made, ws, tab)

    call = await ToolCall.objects.aget(run=run)
    assert "Waiting for your approval" in card and "Handoff note" in card
    assert "<code>handoff_note</code> · built-in tool" in card
    assert "&quot;note&quot;: &quot;Please leave a handoff note: deploy at noon&quot;" in card
    assert f'"call": {call.pk}, "verdict": "approve"' in card
    assert "Always allow this tool in this conversation" in card
    assert "Edit and approve" in card and 'name="reason"' in card
    assert "Approve all" not in card  # one call waits
    assert 'data-running="false"' in card
    assert "Waiting for your approval: Handoff note" in card  # read to screen readers
    assert "pill-in_progress" not in card  # the waiting call is the card, not a pill
    link = f'<a id="conversation-link-{made.pk}" hx-swap-oob="innerHTML">'
    sidebar = (await frames_until(elsewhere, link))[-1]
    assert f'{link}<span class="waiting-mark" title="Waiting for your approval">' in sidebar
    assert sidebar.endswith("</span></span>Deploy</a>")  # the title, read again

    await ws.send_to(text_data=decide(run, "approve", call))

    frames = await frames_until(ws, DONE)
    assert "Approved: Handoff note." in "".join(frames)
    final = frames[-1]
    assert 'class="pill pill-completed"' in final and "waiting-calls" not in final
    assert "recorded for the team" in final
    assert DONE in (await frames_until(tab, DONE))[-1]
    cleared = (await frames_until(elsewhere, link))[-1]
    assert cleared == f"{link}Deploy</a>"
    await run.arefresh_from_db()
    await call.arefresh_from_db()
    assert (run.status, call.approval, call.status) == ("completed", "approved", "completed")
    for socket in (ws, tab, elsewhere):
        await socket.disconnect()


async def test_a_denial_with_a_reason_is_told_to_the_model_and_the_pill_says_denied() -> None:
    made = await handoff_conversation()
    ws = await connect(await owner_of(made), made)
    run, _ = await waiting_run(made, ws)
    call = await ToolCall.objects.aget(run=run)

    await ws.send_to(text_data=decide(run, "deny", call, reason="not before Friday"))

    frames = await frames_until(ws, DONE)
    final = frames[-1]
    assert "pill-denied" in final and "· denied" in final
    assert sum(frame.count("pill-denied") for frame in frames[:-1]) == 1  # live: one pill
    await call.arefresh_from_db()
    assert (call.approval, call.decision_reason, call.failure) == (
        "denied",
        "not before Friday",
        "denied",
    )
    await ws.disconnect()


async def test_a_refused_edit_is_told_by_its_box_only_to_its_socket_then_an_edit_runs() -> None:
    made = await handoff_conversation()
    owner = await owner_of(made)
    ws, tab = await connect(owner, made), await connect(owner, made)
    run, _ = await waiting_run(made, ws, tab)
    call = await ToolCall.objects.aget(run=run)

    await ws.send_to(text_data=decide(run, "edit", call, arguments='{"note": ""}'))

    refused = await notice(ws)
    assert "do not fit the tool&#x27;s schema at note" in refused
    assert (
        f'<p class="waiting-error" id="waiting-error-{call.pk}" role="alert" hx-swap-oob="true">'
        in refused
    )
    assert "waiting-calls" not in refused  # the card is not drawn again: the box keeps the text
    assert await tab.receive_nothing(timeout=0.2)
    await call.arefresh_from_db()
    assert call.approval == "waiting"

    edited = '{"note": "deploy at one", "recipient": "ops"}'
    await ws.send_to(text_data=decide(run, "edit", call, arguments=edited))

    final = (await frames_until(ws, DONE))[-1]
    assert "recorded for ops" in final
    await call.arefresh_from_db()
    assert (call.approval, call.edited_arguments) == ("edited", edited)
    await tab.disconnect()
    await ws.disconnect()


async def test_a_call_that_needs_no_decision_runs_once_the_others_are_decided() -> None:
    made = await handoff_conversation("ada", "handoff_note", "search_cards")
    ws = await connect(await owner_of(made), made)
    await send(ws, "Leave a handoff note and search the cards for pills")
    card = (await frames_until(ws, WAITING))[-1]
    run = await Run.objects.aget(conversation=made)
    assert "Then, without asking: Search cards." in card  # it only reads
    note = await ToolCall.objects.aget(run=run, name="handoff_note")

    await ws.send_to(text_data=decide(run, "always", note))

    assert "Always allowed: Handoff note." in "".join(await frames_until(ws, DONE))
    await made.arefresh_from_db()
    assert made.always_allowed == ["handoff_note"]
    statuses = [call.status async for call in ToolCall.objects.filter(run=run)]
    assert statuses == ["completed", "completed"]
    await ws.disconnect()


async def test_several_waiting_calls_are_decided_one_by_one_or_all_at_once() -> None:
    made = await handoff_conversation(
        "ada", "handoff_note", "search_cards", tool_policies={"search_cards": "ask"}
    )
    ws = await connect(await owner_of(made), made)
    await send(ws, "Leave a handoff note and search the cards for pills")
    card = (await frames_until(ws, 'data-waiting="Handoff note, Search cards"'))[-1]
    run = await Run.objects.aget(conversation=made)
    assert "Approve all" in card and "Deny all" in card
    assert f'"run": {run.pk}, "verdict": "approve"' in card
    note = await ToolCall.objects.aget(run=run, name="handoff_note")

    await ws.send_to(text_data=decide(run, "deny", note, reason="later"))

    frames = await frames_until(ws, 'data-waiting="Search cards"')
    assert "<strong>Handoff note</strong>: denied; the agent is told so" in frames[-1]
    assert "Approve all" not in frames[-1]
    await ws.send_to(text_data=decide(run, "approve"))  # every call that still waits

    assert "Approved: Search cards." in "".join(await frames_until(ws, DONE))
    approvals = [call.approval async for call in ToolCall.objects.filter(run=run)]
    assert approvals == ["denied", "approved"]
    await ws.disconnect()


async def test_a_readers_forged_decision_and_a_strangers_socket_are_refused() -> None:
    made = await handoff_conversation()
    owner = await owner_of(made)
    made.shared = True
    await made.asave(update_fields=["shared"])
    ws = await connect(owner, made)
    run, _ = await waiting_run(made, ws)
    call = await ToolCall.objects.aget(run=run)
    reader = await sync(make.user)("bob")
    watching = await connect(reader, made)

    await watching.send_to(text_data=decide(run, "approve", call))
    await watching.send_to(text_data=json.dumps({"action": "cancel"}))

    assert "only its owner can write in it" in await notice(watching)
    assert "only its owner can write in it" in await notice(watching)
    await call.arefresh_from_db()
    assert call.approval == "waiting"
    made.shared = False
    await made.asave(update_fields=["shared"])
    stranger = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns),  # type: ignore[arg-type]
        f"/ws/conversations/{made.pk}/",
    )
    stranger.scope["user"] = await sync(make.user)("eve")  # type: ignore[typeddict-unknown-key]
    connected, code = await stranger.connect()
    assert (connected, code) == (False, 4404)
    await watching.disconnect()
    await ws.disconnect()


async def test_two_tabs_deciding_at_once_one_wins_the_other_is_told() -> None:
    made = await handoff_conversation()
    owner = await owner_of(made)
    ws, tab = await connect(owner, made), await connect(owner, made)
    run, _ = await waiting_run(made, ws, tab)
    call = await ToolCall.objects.aget(run=run)

    await asyncio.gather(
        ws.send_to(text_data=decide(run, "approve", call)),
        tab.send_to(text_data=decide(run, "deny", call)),
    )

    first, second = await frames_until(ws, DONE), await frames_until(tab, DONE)
    told = [
        frame
        for frame in first + second
        if 'class="notice notice-error"' in frame and "no longer waiting" in frame
    ]
    assert len(told) == 1, told
    assert "This call was already" in told[0] and "by ada at" in told[0]
    await call.arefresh_from_db()
    assert call.approval in ("approved", "denied")
    await run.arefresh_from_db()
    assert run.status == "completed"

    await ws.send_to(text_data=decide(run, "approve", call))  # decided long ago
    assert "no longer waiting" in await notice(ws)
    await ws.disconnect()
    await tab.disconnect()


async def test_stop_while_waiting_ends_the_run_in_every_tab() -> None:
    made = await handoff_conversation()
    owner = await owner_of(made)
    ws, tab = await connect(owner, made), await connect(owner, made)
    run, _ = await waiting_run(made, ws, tab)

    await ws.send_to(text_data=json.dumps({"action": "cancel"}))

    for socket in (ws, tab):
        frames = await frames_until(socket, "The reply was stopped.")
        assert 'data-waiting=""' in frames[-1] and "waiting-calls" not in frames[-1]
        assert "pill-cancelled" in frames[-1]
    await run.arefresh_from_db()
    call = await ToolCall.objects.aget(run=run)
    assert (run.status, call.approval) == ("cancelled", "stopped")

    await send(ws, "hello again")  # the conversation goes on
    assert "You said" in (await frames_until(ws, DONE))[-1]
    await ws.disconnect()
    await tab.disconnect()


async def test_decide_frames_that_cannot_be_done_say_why() -> None:
    made = await handoff_conversation()
    owner = await owner_of(made)
    other = await handoff_conversation("bob")
    ws = await connect(owner, made)
    run, _ = await waiting_run(made, ws)
    call = await ToolCall.objects.aget(run=run)
    theirs = await connect(await owner_of(other), other)
    their_run, _ = await waiting_run(other, theirs)

    cases = [
        (json.dumps({"action": "decide", "verdict": "approve"}), "needs the run"),
        (json.dumps({"action": "decide", "run": run.pk, "call": "x"}), "needs the run"),
        (json.dumps({"action": "decide", "run": run.pk}), "needs a verdict"),
        (decide(run, "maybe", call), "Unknown decision &#x27;maybe&#x27;"),
        (decide(their_run, "approve"), "no tool call waiting"),
        (decide(run, "edit", call), "Edit one call at a time, with its new arguments"),
    ]
    for frame, expected in cases:
        await ws.send_to(text_data=frame)
        assert expected in await notice(ws), frame
    await call.arefresh_from_db()
    await their_run.arefresh_from_db()
    assert (call.approval, their_run.status) == ("waiting", "requires_action")
    await ws.disconnect()
    await theirs.disconnect()


async def test_a_page_that_showed_the_run_live_gets_the_card_if_it_waits_meanwhile() -> None:
    made = await handoff_conversation()
    owner = await owner_of(made)
    ws = await connect(owner, made)
    run, _ = await waiting_run(made, ws)

    late = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns),  # type: ignore[arg-type]
        f"/ws/conversations/{made.pk}/?live={run.pk}",
    )
    late.scope["user"] = owner  # type: ignore[typeddict-unknown-key]
    assert (await late.connect())[0]
    frame = await late.receive_from()
    assert "waiting-calls" in frame and WAITING in frame
    await late.disconnect()
    await ws.disconnect()


def test_the_page_of_a_waiting_run_says_so(client_in: Client, user: Any) -> None:
    made = make.conversation(user, "Deploy", enabled_tools=["handoff_note"])
    make.run_turn(made, NOTE)
    other = make.conversation(user, "Quiet")

    page = client_in.get(reverse("chat:conversation_detail", args=[made.pk])).content.decode()

    assert "<title>Waiting for approval · Deploy · Agent Lab</title>" in page
    assert 'data-waiting="Handoff note"' in page
    assert '<button type="submit" id="stop">Stop</button>' in page  # Stop ends a waiting run
    assert 'class="waiting-calls"' in page and "Reason (optional)" in page
    assert "Regenerate" not in page and "Retry" not in page
    assert 'class="status status-requires_action">Waiting for approval<' in page
    mark = '><span class="waiting-mark" title="Waiting for your approval">'
    assert f'href="/c/{made.pk}/" aria-current="page"{mark}' in page
    assert f'href="/c/{other.pk}/">Quiet</a>' in page  # no mark, not even an empty one
    quiet = client_in.get(reverse("chat:conversation_detail", args=[other.pk])).content.decode()
    assert f'href="/c/{made.pk}/"{mark}' in quiet and "<title>Quiet · Agent Lab</title>" in quiet


def test_a_reader_sees_the_waiting_call_and_no_mark(client_in: Client, user: Any) -> None:
    made = make.conversation(make.user("bob"), "Shared deploy", enabled_tools=["handoff_note"])
    made.shared = True
    made.save()
    make.run_turn(made, NOTE)

    page = client_in.get(reverse("chat:conversation_detail", args=[made.pk])).content.decode()

    assert "data-read-only" in page and "Waiting for the owner's decision." in page
    assert 'title="Waiting for your approval"' not in page  # not theirs to decide
