"""The control channel: a socket in any process stops a run or catches up with it."""

from __future__ import annotations

import asyncio
from typing import Any

from channels.layers import get_channel_layer

from chat.fragments import RunPublisher
from chat.models import Run


def control_group(conversation_id: int) -> str:
    """The group a run in progress listens on for cancel and catch-up requests."""
    return f"conversation-control.{conversation_id}"


async def request_cancel(conversation_id: int) -> None:
    """Ask the run in progress in a conversation to stop, whichever process executes it."""
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(control_group(conversation_id), {"type": "run.cancel"})


async def request_catch_up(conversation_id: int, reply_channel: str) -> None:
    """Ask the run in progress to send its live state to one socket."""
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(
            control_group(conversation_id), {"type": "run.sync", "reply_channel": reply_channel}
        )


async def listen(run: Run, task: asyncio.Task[Any] | None, publisher: RunPublisher | None) -> None:
    layer = get_channel_layer()
    if layer is None or task is None:
        return
    channel = await layer.new_channel()
    group = control_group(run.conversation_id)
    await layer.group_add(group, channel)
    try:
        while True:
            # No timeout on this read: Redis pub/sub unsubscribes a channel whose receive is
            # cancelled, and drops what is sent to it until the next receive. Cancelling it is
            # how the channel ends, with the run.
            message = await layer.receive(channel)
            if message.get("type") == "run.cancel" and not task.cancelling():
                task.cancel()
            elif message.get("type") == "run.sync" and publisher is not None:
                await publisher.send_snapshot(message["reply_channel"])
    finally:
        await asyncio.shield(layer.group_discard(group, channel))
