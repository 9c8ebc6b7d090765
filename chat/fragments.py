"""Run events -> HTML fragments (template partials with hx-swap-oob) for the conversation group.

The page is rendered from the database with the same partials, so a reload shows what the live
stream showed. Text deltas are coalesced: a fast provider becomes a few dozen frames a second,
not one frame per token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.template.loader import render_to_string
from django.utils import timezone

from chat import access, news
from chat.agent import events
from chat.agent.tools import humanize
from chat.frame_rate import FLUSH_INTERVAL, frame_interval
from chat.live_markdown import LiveText
from chat.models import Conversation, Message, Run
from chat.models.conversations import group_name
from chat.templatetags.chat_tags import fragment_id, pill
from chat.tool_progress import Pacer, RunningCall, running_call
from chat.transcripts import versions
from chat.turns import Turn, conversation_turns, turn_for_run, window_before

logger = logging.getLogger(__name__)
TEMPLATE = "chat/conversation.html"
OPENING_WAIT = 0.025
FRAGMENT = "fragment"
"""The channel layer message that carries HTML to sockets: `html` (one frame, or a list of
frames), and optionally `close` (the socket closes after it) and `sender`/`sender_html` (HTML
for that one socket only). Every consumer that shows live pages takes it (chat.consumers)."""


ENDED = {
    "completed": "The {subject} is finished{detail}.",
    "cancelled": "The {subject} was stopped{detail}.",
    "failed": "The {subject} failed: {error}",
    "interrupted": "The {subject} was interrupted: {error}",
}


def ended_text(subject: str, status: str, error: str | None = None, detail: str = "") -> str:
    """What a screen reader hears when a long task ends ("The reply is finished."); what it
    streamed is not announced. `detail` follows a finished or stopped one's status."""
    text = ENDED.get(status, "The {subject} stopped: {error}")
    return text.format(subject=subject, detail=detail, error=error or "no reason given")


def render(partial: str, context: dict[str, Any]) -> str:
    """Render one named fragment of the conversation page; names are ours, never the client's."""
    return render_to_string(f"{TEMPLATE}#{partial}", context)


async def broadcast(group: str, html: str | list[str], **extra: Any) -> None:
    """Send HTML to every socket of `group`, in any process (see FRAGMENT for `extra`)."""
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(group, {"type": FRAGMENT, "html": html, **extra})


async def send_to(channel: str, html: str) -> None:
    """Send HTML to one socket."""
    layer = get_channel_layer()
    if layer is not None:
        await layer.send(channel, {"type": FRAGMENT, "html": html})


def announce(text: str) -> str:
    """A line for screen readers (the page's polite status region): run started, tool looked
    up, reply finished."""
    return render("announce", {"announce": text, "oob": True})


def transcript(conversation: Conversation, live: LiveState | None = None) -> str:
    """The latest window of the active path as an out-of-band swap: a new version or a switch
    changes turns above the newest one, and every tab showing the conversation follows."""
    window = window_before(conversation)
    context = {"conversation": conversation, "window": window, "live": live}
    body = render("turns", {**context, "turns": conversation_turns(conversation, window)})
    return f'<div id="transcript" hx-swap-oob="innerHTML">{body}</div>'


@dataclass
class LiveState(LiveText):
    """What has been published of a run in progress; the catch-up snapshot renders from it."""

    running: dict[str, str] = field(default_factory=dict)
    started: dict[str, datetime] = field(default_factory=dict)
    progress: dict[str, events.ToolCallProgress] = field(default_factory=dict)
    finished: list[events.ToolResult] = field(default_factory=list)
    draft: str = ""
    """Of a resumed run, the text of the turn that was streaming, until its new text comes."""

    def indicator(self) -> list[RunningCall]:
        """The calls under way as the "Looking up" line names them, timed now."""
        now = timezone.now()
        return [
            running_call(name, self.started.get(call, now), self.progress.get(call), now)
            for call, name in self.running.items()
        ]


SHOWN_FIRST = (
    events.ToolCallStarted,
    events.ToolCallFinished,
    events.ApprovalRequested,
    events.TurnEnd,
    events.RunFinished,
)
"""Events whose output the opening frame carries when they come before it is sent: it goes
at once, and their own frame is rendered after it."""


class RunPublisher:
    """Listener that turns one run's events into fragments for the conversation's group."""

    streaming = 0
    """Runs of this process between their first frame and their last (see frame_interval)."""

    def __init__(
        self,
        run: Run,
        *,
        user_message: Message | None = None,
        sender: str | None = None,
        interval: float = FLUSH_INTERVAL,
        new_version: bool = False,
    ) -> None:
        self.run = run
        self.user_message = user_message
        self.sender = sender
        self.new_version = new_version
        self.group = group_name(run.conversation_id)
        self.base_interval = interval
        self._counted = False
        self.state = LiveState()
        self.pacer = Pacer()
        self.frames = 0
        self._pending: list[tuple[str, str]] = []
        self._last_flush = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._lock = asyncio.Lock()
        self._paragraph_break = False
        self._flushing: asyncio.Future[None] | None = None
        self._opening: asyncio.Future[None] | None = None
        self._first_output = asyncio.Event()
        self.recorded: Callable[[Message | None], Turn] | None = None
        """The finished turn from the rows the run wrote (Recorder.turn); without it, the
        finished turn is read back from the database."""

    @property
    def interval(self) -> float:
        return frame_interval(self.base_interval, RunPublisher.streaming)

    def _count(self, streaming: bool) -> None:
        if streaming != self._counted:
            self._counted = streaming
            RunPublisher.streaming += 1 if streaming else -1

    def close(self) -> None:
        """The run is over, whether or not it told RunFinished (a run deleted meanwhile)."""
        self._count(False)
        self.pacer.close()

    def read_due(self) -> float:
        """When the run's provider stream need next be read (chat.agent.http.READ_PACING):
        at the next frame, once the first one with text is out; at once before that."""
        return self._last_flush + self.interval if self._last_flush else 0.0

    async def __call__(self, run: Run, event: events.RunEvent) -> None:
        if isinstance(event, events.TextDelta | events.ReasoningDelta):
            first = not self._last_flush
            self._buffer(event)
            if first:
                # The first token goes out at once, and the loop is given a moment so the frame
                # reaches the sockets before the parser works through the rest of a burst.
                await self.flush()
                await asyncio.sleep(0.001)
            return
        if isinstance(event, events.RunStarted):
            self._count(True)
            # Rendered and sent from a task of its own, so that the runtime sends the provider
            # request meanwhile instead of after it; every later frame waits for this one.
            self._opening = asyncio.ensure_future(self._open())
            return
        if isinstance(event, events.ToolCallProgress):
            self.state.progress[event.tool_call_id] = event
            await self.pacer.offer(event.tool_call_id, lambda: self._frame(event))
            return
        if isinstance(event, events.RunFinished):
            self.close()
        if isinstance(event, SHOWN_FIRST):
            self._first_output.set()
        await self._frame(event)

    async def _frame(self, event: events.RunEvent) -> None:
        if self._opening is not None and isinstance(event, SHOWN_FIRST):
            # Rendered once the opening frame is: a call answered at once (a resumed run's
            # denial) must not be in both. Other events (a step's start, the request sent) do
            # not wait: they must not hold back the provider request or its reading.
            await self._opening
        async with self._lock:
            await self._publish(self._drain() + await self._render(event))

    async def _open(self) -> None:
        """The run's first frame: the user message, the reply so far, the running state.

        It waits up to OPENING_WAIT for the first words: a fast model's reply then starts in the
        frame that shows the question, and the browser renders once instead of twice.
        """
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._first_output.wait(), OPENING_WAIT)
            html = await self._render(events.RunStarted()) + self._drain()
            if self.sender:
                await self._group_send(
                    html, sender=self.sender, sender_html=self._emptied_composer()
                )
            else:
                await self._group_send(html)
            if self.new_version:  # a run resumed after a decision (or an expiry) waits no more
                from chat import waiting

                await waiting.tell_owner(self.run.conversation, False)
        except Exception:
            logger.exception("run %s: the first frame was not sent", self.run.pk)

    def _buffer(self, event: events.TextDelta | events.ReasoningDelta) -> None:
        kind = "text" if isinstance(event, events.TextDelta) else "reasoning"
        text = event.text
        if kind == "text" and self._paragraph_break:
            text, self._paragraph_break = "\n\n" + text, False
        self._pending.append((kind, text))
        self._first_output.set()
        if not self._last_flush or self._timer is not None:
            return
        if self._flushing is not None and not self._flushing.done():
            return  # the flush already scheduled takes this delta too
        wait = self._last_flush + self.interval - time.monotonic()
        if wait <= 0:
            self._flushing = asyncio.ensure_future(self.flush())
        else:
            self._timer = asyncio.get_running_loop().call_later(wait, self._flush_later)

    def _flush_later(self) -> None:
        self._timer = None
        self._flushing = asyncio.ensure_future(self.flush())

    async def flush(self) -> None:
        if self._opening is not None:
            await self._opening  # the first frame takes what is pending
        async with self._lock:
            await self._publish(self._drain())

    def _drain(self) -> str:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return ""
        self._last_flush = time.monotonic()
        pending, self._pending = self._pending, []
        return self.state.frames(pending, self.run.pk)

    async def _render(self, event: events.RunEvent) -> str:
        key = self.run.pk
        state = self.state
        match event:
            case events.RunStarted():
                if self.new_version:
                    turns = await database_sync_to_async(transcript)(self.run.conversation, state)
                else:
                    # Nothing but the user message is stored yet: no queries on the way to the
                    # provider request.
                    turn = Turn(user=self.user_message, run=self.run)
                    turns = (
                        '<div id="transcript" hx-swap-oob="beforeend">'
                        + render("turn", {"turn": turn, "live": state})
                        + "</div>"
                    )
                return (
                    turns
                    + announce("The agent is answering.")
                    + render("run-state", {"running": True})
                    + render("notice", {})
                    + render("title", {"conversation": self.run.conversation, "oob": True})
                )
            case events.TurnEnd(message) if message.content:
                self._paragraph_break = True
            case events.ToolCallStarted(call):
                state.running[call.id] = call.name
                state.started[call.id] = timezone.now()
                return self._indicator() + announce(f"Looking up: {humanize(call.name)}")
            case events.ToolCallProgress():
                return self._indicator()
            case events.ToolCallFinished(result):
                state.running.pop(result.tool_call.id, None)
                state.started.pop(result.tool_call.id, None)
                state.progress.pop(result.tool_call.id, None)
                self.pacer.forget(result.tool_call.id)
                state.finished.append(result)
                return self._indicator() + (
                    f'<span id="{fragment_id("pills", key)}" hx-swap-oob="beforeend">'
                    + pill(
                        result.tool_call.name,
                        result.status,
                        result.error or "",
                        failure=result.failure,
                    )
                    + "</span>"
                )
            case events.RunFinished(status, error):
                turn = await self._finished_turn()
                if status == "requires_action":
                    from chat import waiting  # it renders with this module's partials

                    return await waiting.started(turn)
                await self._tell_owner_news()
                return (
                    render("reply", {"turn": turn, "oob": True})
                    + render("run-state", {"running": False, "ended": status})
                    + announce(ended_text("reply", status, error))
                )
        return ""

    async def _tell_owner_news(self) -> None:
        """The run ended (and is recorded as such): its owner's pages mark the conversation
        as news when the rule says so (`chat.news`: ended since they last opened it; nothing is
        sent otherwise); the page that shows it tells the server it was seen."""
        from chat import waiting  # it renders with this module's partials

        conversation = self.run.conversation
        if access.is_replay(conversation):
            return  # an evaluation's replay has no line in its owner's list
        try:
            if await database_sync_to_async(news.news_of)(conversation):
                await waiting.tell_owner(conversation, False, news=True)
        except Exception:
            logger.exception("run %s: the news mark was not sent", self.run.pk)

    def _indicator(self) -> str:
        calls = self.state.indicator()
        return render("indicator", {"key": self.run.pk, "calls": calls, "oob": True})

    async def _finished_turn(self) -> Turn:
        if self.recorded is None:
            return await database_sync_to_async(turn_for_run)(self.run)
        turn = self.recorded(self.user_message)
        if self.new_version and turn.start is not None:
            # Only a new version's turn has versions at its start (the version switcher).
            points = await database_sync_to_async(versions.points)(self.run.conversation)
            turn.point = points.get(turn.start.index)
        return turn

    async def snapshot(self) -> str:
        """The live reply as published so far (pending text is not in it: it follows)."""
        turn = await database_sync_to_async(turn_for_run)(self.run)
        return render("live-reply", {"turn": turn, "live": self.state, "oob": True})

    async def send_snapshot(self, channel: str) -> None:
        if self._opening is not None:
            await self._opening
        async with self._lock:
            html = await self.snapshot() + render("run-state", {"running": True})
            await send_to(channel, html)

    @staticmethod
    def _emptied_composer() -> str:
        return render(
            "message-box",
            {
                "oob": True,
                "running": True,
                "max_message_chars": settings.AGENTLAB_MAX_MESSAGE_CHARS,
            },
        )

    async def _publish(self, html: str) -> None:
        if html:
            if self._opening is not None:
                await self._opening
            await self._group_send(html)

    async def _group_send(self, html: str, **extra: str) -> None:
        """Send a frame to every socket; `sender`/`sender_html` add HTML for one socket only."""
        self.frames += 1
        await broadcast(self.group, html, **extra)
