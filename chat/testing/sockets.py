"""The conversation socket driven in-process (channels.testing), and reading its frames."""

from __future__ import annotations

import json
import re
from typing import Any

from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from chat.models import Conversation
from chat.routing import websocket_urlpatterns

DONE = 'data-running="false"'
"""In the frame that ends a run (the composer is enabled again)."""
STREAMED = '-text" hx-swap-oob="beforeend"'
"""In every frame that appends streamed text to a reply."""
_STREAMED_TEXT = re.compile(r'-text" hx-swap-oob="beforeend">(.*?)</span>', re.S)


async def connect(user: Any, conversation: Conversation) -> WebsocketCommunicator:
    """A connected socket on `conversation` as `user` (the session middleware is bypassed)."""
    router = URLRouter(websocket_urlpatterns)  # type: ignore[arg-type]  # path() to an ASGI app
    communicator = WebsocketCommunicator(router, f"/ws/conversations/{conversation.pk}/")
    communicator.scope["user"] = user  # type: ignore[typeddict-unknown-key]  # as AuthMiddleware does
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def frames_until(
    communicator: WebsocketCommunicator, marker: str, wait: float = 5
) -> list[str]:
    """Every frame up to and including the first one containing `marker`."""
    frames: list[str] = []
    while not frames or marker not in frames[-1]:
        frame = await communicator.receive_from(timeout=wait)
        assert isinstance(frame, str), "the consumer sends text frames only"
        frames.append(frame)
    return frames


async def send(communicator: WebsocketCommunicator, message: str, **extra: Any) -> None:
    """The frame the composer sends."""
    await communicator.send_to(
        text_data=json.dumps({"action": "send", "message": message, **extra})
    )


def streamed_text(frames: list[str]) -> str:
    """The text the frames appended to replies, in order."""
    return "".join(chunk for frame in frames for chunk in _STREAMED_TEXT.findall(frame))
