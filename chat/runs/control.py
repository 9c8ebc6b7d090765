"""Stop a run or catch up with it from a socket in any process (the run listens on its
conversation's control group: `tasks.TaskKind.hold`)."""

from __future__ import annotations

from typing import Any

from chat.fragments import RunPublisher

from .tasks import RUNS, ControlHandler

SYNC = "run.sync"


async def request_cancel(conversation_id: int) -> None:
    """Ask the run in progress in a conversation to stop, whichever process executes it."""
    await RUNS.request_cancel(conversation_id)


async def request_catch_up(conversation_id: int, reply_channel: str) -> None:
    """Ask the run in progress to send its live state to one socket."""
    await RUNS.request(conversation_id, {"type": SYNC, "reply_channel": reply_channel})


def handler(publisher: RunPublisher | None) -> ControlHandler | None:
    """What a run does with control messages other than Stop: catch-ups, when it publishes."""
    if publisher is None:
        return None

    async def handle(message: dict[str, Any]) -> None:
        if message.get("type") == SYNC:
            await publisher.send_snapshot(message["reply_channel"])

    return handle
