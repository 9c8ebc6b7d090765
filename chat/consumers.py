"""The sockets: ChatConsumer (JSON frames in, HTML fragments out; runs are started and stopped,
never awaited) and EvalProgressConsumer (a page watching an evaluation or a comparison)."""

from __future__ import annotations

import json
import logging
import time
from typing import Any
from urllib.parse import parse_qs

from autobahn.exception import Disconnected
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from chat import access, agent, runs, waiting
from chat.evals.fragments import PAGES, snapshot
from chat.fragments import FRAGMENT, broadcast, render, transcript
from chat.models import Conversation
from chat.runs import approvals, resume
from chat.transcripts import attachments as stored_files
from chat.transcripts import versions
from chat.transcripts.files import Refused
from chat.turns import turn_for_run

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_FLOODING = 4429
READ_ONLY = access.READ_ONLY


class FrameBudget:
    """A token bucket per connection: short bursts pass, a flood is refused, then cut off."""

    def __init__(self, *, burst: int, per_second: float, cutoff: int) -> None:
        self.burst = burst
        self.per_second = per_second
        self.cutoff = cutoff
        self.tokens = float(burst)
        self.refused = 0
        self.updated = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.per_second)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            self.refused = 0
            return True
        self.refused += 1
        return False

    @property
    def exhausted(self) -> bool:
        return self.refused >= self.cutoff


class FragmentConsumer(AsyncWebsocketConsumer):
    """A socket of a live page: what the server broadcasts (FRAGMENT) goes out as frames."""

    group = ""

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Fragments touch no database: skip Channels' per-message aclose_old_connections, a
        # trip through the one sync thread that every run's database work also queues on.
        if message["type"] == FRAGMENT:
            await self.fragment(message)
            return
        await super().dispatch(message)

    async def fragment(self, event: dict[str, Any]) -> None:
        html = event["html"]
        frames = [html] if isinstance(html, str) else list(html)
        if event.get("sender") == self.channel_name:
            # The run this socket started: its composer is emptied in the same frame.
            frames[-1] += event.get("sender_html", "")
        try:
            for frame in frames:
                await self.send(text_data=frame)
            if event.get("close"):
                await self.close()
        except Disconnected:
            # The tab closed between a frame's publication and daphne telling this consumer;
            # the work goes on, and the disconnect that follows ends the consumer.
            logger.debug("%s: a frame for a closed socket", self.group)

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)


class ChatConsumer(FragmentConsumer):
    """One browser tab watching one conversation; a router between frames, runs and the group."""

    conversation: Conversation
    user_group = ""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        pk = self.scope["url_route"]["kwargs"]["pk"]
        readable = access.conversations(user, access.Action.READ)
        conversation = await readable.filter(pk=pk).afirst()
        if conversation is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.conversation = conversation
        # Why this user may not write here, the answer to each of their frames ("" if they may).
        self.refused = access.denied(user, access.Action.WRITE, conversation)
        self.budget = FrameBudget(
            burst=settings.AGENTLAB_WS_BURST,
            per_second=settings.AGENTLAB_WS_FRAMES_PER_SECOND,
            cutoff=settings.AGENTLAB_WS_BURST * 3,
        )
        self.group = conversation.group_name
        await self.channel_layer.group_add(self.group, self.channel_name)
        # The sidebar marks of the user's own conversations that wait for them, from any run.
        self.user_group = waiting.user_group(user.pk)
        await self.channel_layer.group_add(self.user_group, self.channel_name)
        await self.accept()
        # A run that waits for a decision streams nothing: the page shows it as it is.
        if await conversation.runs.in_progress().aexists():
            await runs.request_catch_up(conversation.pk, self.channel_name)
        elif live := _live_run(self.scope.get("query_string", b"")):
            # The page showed this run streaming, but it ended before the socket opened.
            run = await conversation.runs.filter(pk=live).afirst()
            if run is not None:
                turn = await database_sync_to_async(turn_for_run)(run)
                await self.send(
                    text_data=render("reply", {"turn": turn, "oob": True})
                    + await database_sync_to_async(waiting.run_state)(turn)
                )

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not self.budget.take():
            if self.budget.exhausted:
                await self.notice("Too many frames: this connection is closed. Reload the page.")
                await self.close(code=CLOSE_FLOODING)
            elif self.budget.refused == 1:
                await self.notice("Too many frames: slow down; this one was ignored.")
            return
        if text_data is None:
            await self.notice("Binary frames are not accepted; send JSON text frames.")
            return
        try:
            frame = json.loads(text_data)
        except json.JSONDecodeError:
            await self.notice("That frame is not valid JSON.")
            return
        if not isinstance(frame, dict):
            await self.notice("A frame must be a JSON object with an action.")
            return
        named = frame.get("conversation")
        if named is not None and str(named) != str(self.conversation.pk):
            await self.notice(
                f"This connection belongs to conversation {self.conversation.pk}; "
                "open the other conversation to write there."
            )
            return
        if self.refused:
            await self.notice(self.refused)
            return
        action = frame.get("action")
        if action == "send":
            await self.send_message(frame.get("message"), attachments=frame.get("attachments"))
        elif action == "cancel":
            await self.cancel()
        elif action == "decide":
            await self.decide(frame)
        elif action in ("edit", "regenerate"):
            index = _number(frame.get("index"))
            if index is None:
                await self.notice(f"A {action} frame needs the index of a message.")
            elif action == "edit":
                await self.send_message(frame.get("message"), version_from=index)
            else:
                await self.start(None, version_from=index)
        elif action == "switch":
            await self.switch(_number(frame.get("index")), _number(frame.get("version")))
        else:
            await self.notice(
                f"Unknown action {str(action)[:40]!r}: use send, cancel, edit, regenerate, "
                "switch or decide."
            )

    async def send_message(
        self, message: Any, *, version_from: int | None = None, attachments: Any = None
    ) -> None:
        if not isinstance(message, str):
            await self.notice("A send frame needs a message (a string).")
            return
        try:
            files = await database_sync_to_async(stored_files.from_tokens)(
                attachments, self.conversation.owner_id, self.conversation.pk
            )
        except Refused as exc:
            await self.notice(str(exc))
            return
        await self.start(message, version_from=version_from, attachments=files)

    async def start(
        self,
        content: str | None,
        *,
        version_from: int | None = None,
        attachments: tuple[agent.Attachment, ...] = (),
    ) -> None:
        try:
            await runs.start_run(
                conversation=self.conversation,
                user=self.scope["user"],
                content=content,
                sender=self.channel_name,
                version_from=version_from,
                attachments=attachments,
            )
        except runs.RunRefused as exc:
            await self.notice(str(exc))

    async def cancel(self) -> None:
        """Stop: the run that waits here for a decision ends at once; one in progress is asked
        to stop, in whichever process executes it."""
        try:
            stopped = await database_sync_to_async(approvals.stop)(
                self.scope["user"], self.conversation
            )
        except approvals.DecisionRefused as exc:
            await self.notice(str(exc))
            return
        if stopped is None:
            await runs.request_cancel(self.conversation.pk)
            return
        await broadcast(self.group, await database_sync_to_async(waiting.stopped)(stopped))
        await waiting.tell_owner(self.conversation, False)

    async def decide(self, frame: dict[str, Any]) -> None:
        """A decision on a waiting tool call (or, without `call`, on all of them). Every tab
        shows the outcome; once none waits, the run goes on here (another process's sweeper
        would take it otherwise). A refused decision is told to this socket alone."""
        run, call = _number(frame.get("run")), frame.get("call")
        called = None if call in (None, "") else _number(call)
        verdict, arguments, reason = (frame.get(k) for k in ("verdict", "arguments", "reason"))
        if run is None or (call not in (None, "") and called is None):
            await self.notice("A decide frame needs the run (and the call, if one) by number.")
            return
        if not isinstance(verdict, str) or not isinstance(reason, str | None):
            await self.notice(f"A decide frame needs a verdict: {', '.join(approvals.VERDICTS)}.")
            return
        if not await self.conversation.runs.filter(pk=run).aexists():
            await self.notice(approvals.NOT_WAITING)
            return
        try:
            decided = await database_sync_to_async(approvals.decide)(
                self.scope["user"],
                run,
                verdict,
                call=called,
                arguments=arguments if isinstance(arguments, str) else None,
                reason=reason or "",
            )
        except approvals.DecisionRefused as exc:
            # Not re-rendered here: an edit that was refused stays in its box, the reason by it.
            refused = waiting.refused(called, str(exc)) if verdict == "edit" else ""
            await self.send(text_data=render("notice", {"notice": str(exc)}) + refused)
            return
        await broadcast(self.group, await database_sync_to_async(waiting.decided)(decided))
        if decided.resumable:  # its publisher unmarks the sidebars
            await resume.claim_and_resume(decided.run)

    async def switch(self, index: int | None, number: int | None) -> None:
        """Show another version; every tab on the conversation follows."""
        if index is None or number is None:
            await self.notice("A switch frame needs the index of a message and a version.")
            return
        try:
            switched = await database_sync_to_async(versions.switch)(
                self.conversation, index, number
            )
        except versions.VersionRefused as exc:
            await self.notice(str(exc))
            return
        if switched:
            html = await database_sync_to_async(transcript)(self.conversation)
            await broadcast(self.group, html + render("notice", {}))

    async def disconnect(self, code: int) -> None:
        await super().disconnect(code)
        if self.user_group:
            await self.channel_layer.group_discard(self.user_group, self.channel_name)

    async def chat_unshared(self, event: dict[str, Any]) -> None:
        """The owner took the conversation back: a reader's socket closes at once."""
        if self.refused:
            await self.notice("The owner stopped sharing this conversation.")
            await self.close(code=CLOSE_NOT_FOUND)

    async def notice(self, text: str) -> None:
        """An error for this socket only, shown above the composer."""
        await self.send(text_data=render("notice", {"notice": text}))


def _number(value: Any) -> int | None:
    """A non-negative integer from a frame (form fields arrive as strings)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isdigit() and len(value) < 10:
        return int(value)
    return None


def _live_run(query_string: bytes) -> int | None:
    query = parse_qs(query_string.decode("latin-1"))
    value = (query.get("live") or [""])[0]
    return int(value) if value.isdigit() else None


class EvalProgressConsumer(FragmentConsumer):
    """A page watching an evaluation (`runs`) or a comparison (`compare`) live: it only
    listens. On connect it gets the page's live parts as they are now, then every push; once
    the evaluation has ended the socket closes (normally: the page does not reconnect)."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        kwargs = self.scope["url_route"]["kwargs"]
        kind, pk = kwargs["kind"], kwargs["pk"]
        page = PAGES.get(kind)
        if page is None or not await page[0]._default_manager.filter(pk=pk).aexists():
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = page[1](pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        parts, active = await database_sync_to_async(snapshot)(kind, pk)
        for part in parts:
            await self.send(text_data=part)
        if not active:
            await self.close()
