"""WebSocket clients that speak exactly the frames the browser sends (htmx 2's ws extension).

One socket per conversation watches; it is also the one that sends, unless the benchmark is
scaled out, where the send goes through a second socket on the other daphne process so every
fragment crosses Redis. Frames are stored with their arrival time and parsed after the round, so
the clients do as little as possible while they are being timed.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.typing import Origin

from bench.provider import ReplySpec
from bench.stats import Timed

DONE = 'data-running="false"'
_TEXT = re.compile(
    r'<span id="reply-(\d+)-text" hx-swap-oob="(beforeend|innerHTML)">(.*?)</span>'
    r'|<div id="reply-(\d+)-done" hx-swap-oob="beforeend">(.*?)</div>(?=<span id="reply-)',
    re.S,
)
"""The streamed text's swaps: raw text appended to or replacing the block being written, and
finished blocks rendered (chat.live_markdown.LiveText.frames)."""
_FINAL = re.compile(r'<div class="text">(.*?)</div>', re.S)
_NOTICE = re.compile(r'<div id="notice" class="notice notice-error"[^>]*>(.*?)</div>', re.S)
_TAG = re.compile(r"<[^>]+>")


@dataclass(frozen=True)
class Target:
    """Where one conversation is watched and where its message is sent from."""

    conversation: int
    watch_url: str
    send_url: str


@dataclass
class RelayedReply(Timed):
    """Client-side timing and content of one reply relayed by the app over a WebSocket."""

    tag: str
    conversation: int
    tokens: int
    sent_at: float = 0.0
    first_token: float | None = None
    completed: float | None = None
    frames: int = 0
    text_frames: int = 0
    bytes: int = 0
    text: str = ""
    final_text: str = ""
    notices: list[str] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    run: int | None = None

    @property
    def streaming_span(self) -> float:
        """From the first text frame to the done frame."""
        if self.first_token is None or self.completed is None:
            return 0.0
        return self.completed - self.first_token


def send_frame(message: str, page_url: str) -> str:
    """The JSON frame htmx 2's ws extension sends for the composer form."""
    headers = {
        "HX-Request": "true",
        "HX-Trigger": "composer",
        "HX-Trigger-Name": None,
        "HX-Target": "composer",
        "HX-Current-URL": page_url,
    }
    frame = {"action": "send", "message": message, "HEADERS": headers}
    return json.dumps(frame, separators=(",", ":"), ensure_ascii=False)


async def connect(base_url: str, session: str, conversation: int) -> ClientConnection:
    ws_url = base_url.replace("http://", "ws://", 1) + f"/ws/conversations/{conversation}/"
    return await websockets.connect(
        ws_url,
        origin=Origin(base_url),
        additional_headers={"Cookie": f"sessionid={session}"},
        compression=None,  # daphne does not negotiate permessage-deflate anyway
        max_size=None,
        open_timeout=60,
        ping_interval=None,
    )


@dataclass
class _Watch:
    target: Target
    spec: ReplySpec
    watcher: ClientConnection
    sender: ClientConnection
    frames: list[tuple[float, str]] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    sent_at: float = 0.0


async def _read(watch: _Watch) -> None:
    frames = watch.frames
    try:
        async for message in watch.watcher:
            now = time.monotonic()
            text = message if isinstance(message, str) else message.decode()
            frames.append((now, text))
            if DONE in text:
                watch.done.set()
    except websockets.ConnectionClosed:
        pass


async def _drain(socket: ClientConnection) -> None:
    try:
        async for _ in socket:
            pass
    except websockets.ConnectionClosed:
        pass


async def relayed_round(
    targets: list[Target],
    session: str,
    specs: list[ReplySpec],
    *,
    limit: float = 120,
    on_sending: Callable[[], None] | None = None,
    on_done: Callable[[], Awaitable[None]] | None = None,
) -> list[RelayedReply]:
    """Open every socket, send every message at once, wait for every done frame.

    on_sending is called once every socket is open, right before the first message is sent;
    on_done is awaited after the last done frame (or the time limit), before the sockets close.
    """

    async def open_watch(target: Target, spec: ReplySpec) -> _Watch:
        watcher = await connect(target.watch_url, session, target.conversation)
        sender = watcher
        if target.send_url != target.watch_url:
            sender = await connect(target.send_url, session, target.conversation)
        return _Watch(target=target, spec=spec, watcher=watcher, sender=sender)

    watches = await asyncio.gather(*map(open_watch, targets, specs))
    readers = [asyncio.create_task(_read(watch)) for watch in watches]
    readers += [
        asyncio.create_task(_drain(watch.sender))
        for watch in watches
        if watch.sender is not watch.watcher
    ]
    try:
        if on_sending is not None:
            on_sending()
        for watch in watches:
            page = f"{watch.target.send_url}/c/{watch.target.conversation}/"
            frame = send_frame(watch.spec.prompt(), page)
            watch.sent_at = time.monotonic()
            await watch.sender.send(frame)
        try:
            async with asyncio.timeout(limit):
                await asyncio.gather(*(watch.done.wait() for watch in watches))
        except TimeoutError:
            pass
        if on_done is not None:
            await on_done()
    finally:
        sockets = [watch.watcher for watch in watches]
        sockets += [watch.sender for watch in watches if watch.sender is not watch.watcher]
        await asyncio.gather(*(socket.close() for socket in sockets), return_exceptions=True)
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    return [_parse(watch) for watch in watches]


def _parse(watch: _Watch) -> RelayedReply:
    reply = RelayedReply(
        tag=watch.spec.tag,
        conversation=watch.target.conversation,
        tokens=watch.spec.tokens,
        sent_at=watch.sent_at,
    )
    done: list[str] = []
    tail = ""
    last_text: float | None = None
    for at, frame in watch.frames:
        if at < watch.sent_at:
            continue
        reply.frames += 1
        reply.bytes += len(frame.encode())
        swaps = _TEXT.findall(frame)
        for run, swap, chunk, done_run, blocks in swaps:
            reply.run = int(run or done_run)
            if blocks:
                done.append(html.unescape(_TAG.sub(" ", blocks)))
            elif swap == "innerHTML":
                tail = html.unescape(chunk)
            else:
                tail += html.unescape(chunk)
        if any(chunk or blocks for _, _, chunk, _, blocks in swaps):
            reply.text_frames += 1
            if reply.first_token is None:
                reply.first_token = at
            elif last_text is not None:
                reply.gaps.append(at - last_text)
            last_text = at
        reply.notices += [html.unescape(notice) for notice in _NOTICE.findall(frame) if notice]
        if DONE in frame:
            reply.completed = at
            final = _FINAL.search(frame)
            if final:
                reply.final_text = " ".join(html.unescape(_TAG.sub(" ", final.group(1))).split())
            break
    reply.text = " ".join([*done, tail])
    return reply


def describe(reply: RelayedReply) -> dict[str, Any]:
    return {
        "tag": reply.tag,
        "conversation": reply.conversation,
        "run": reply.run,
        "ttft": reply.ttft,
        "total": reply.total,
        "frames": reply.frames,
        "text_frames": reply.text_frames,
        "bytes": reply.bytes,
        "notices": reply.notices,
    }
