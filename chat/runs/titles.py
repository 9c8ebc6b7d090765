"""Titles proposed by the model: after a conversation's first completed run, the endpoint that
ran it is asked for a short title, in a task of its own (see AGENTLAB_TITLES).

Only a title that is still the automatic one (the first message's, see `title_from`) is
replaced, and only if it is still that one when the answer arrives: a rename always wins. A
failed request changes nothing; the run has long been reported by then.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from channels.db import database_sync_to_async as sync_to_async
from django.conf import settings

from chat.agent.errors import ChatClientError
from chat.agent.scripted import scripted_title
from chat.agent.titles import propose_title
from chat.fragments import broadcast, render
from chat.models import Conversation, Message, Run, RunStatus, title_from
from chat.models.conversations import group_name

from . import tasks
from .exceptions import RunRefused
from .providers import Endpoint, build_client

logger = logging.getLogger(__name__)
TITLE_SECONDS = 60.0
"""The whole title request, retries included, gives up after this."""


@dataclass(frozen=True)
class Untitled:
    """A conversation whose title may be replaced: its title now and its first exchange."""

    conversation_id: int
    title: str
    first_message: str
    reply: str | None


def propose_later(run: Run, target: Endpoint) -> asyncio.Task[str | None] | None:
    """After a completed run, ask `target` for its conversation's title in a task of its own
    (kept in `tasks.background`); the task, or None when there is nothing to ask."""
    if settings.AGENTLAB_TITLES == "off" or run.status != RunStatus.COMPLETED:
        return None
    if tasks.stopping.is_set():
        return None
    return tasks.launch(propose(run, target))


async def settle() -> None:
    """Wait until no title request of this process is in flight (tests)."""
    while tasks.background:
        await asyncio.wait(list(tasks.background))


async def propose(run: Run, target: Endpoint) -> str | None:
    """The new title of the run's conversation, saved and pushed to its open tabs; None when
    the title stays (renamed, not the first completed run, no answer, an error)."""
    try:
        untitled = await sync_to_async(_untitled)(run)
        if untitled is None:
            return None
        if target.scripted:
            title = scripted_title(untitled.first_message)
        else:
            title = await _ask(target, untitled, model=run.model)
        if not title or title == untitled.title:
            return None
        if not await sync_to_async(_save)(untitled, title):
            return None
    except (ChatClientError, RunRefused, TimeoutError) as exc:
        # Neither the prompt nor the provider's message (it may quote the prompt) is logged.
        status = getattr(exc, "status_code", None)
        logger.info(
            "conversation %s: no title proposed (%s%s); the first message's stays",
            run.conversation_id,
            type(exc).__name__,
            f", HTTP {status}" if status else "",
        )
        return None
    except Exception:
        logger.exception("conversation %s: the title proposal failed", run.conversation_id)
        return None
    await publish(Conversation(pk=untitled.conversation_id, title=title))
    return title


def _untitled(run: Run) -> Untitled | None:
    """The run's conversation if this is its first completed run and its title is still the
    one its first message gave."""
    conversation_id = run.conversation_id
    earlier = Run.objects.filter(conversation_id=conversation_id, status=RunStatus.COMPLETED)
    if earlier.exclude(pk=run.pk).exists():
        return None
    conversation = Conversation.objects.filter(pk=conversation_id).only("title").first()
    first = (
        Message.objects.active()
        .filter(conversation_id=conversation_id, role=Message.Role.USER)
        .only("content")
        .first()
    )
    if conversation is None or first is None or not first.content:
        return None
    if conversation.title not in ("", title_from(first.content)):
        return None  # renamed
    reply = (
        Message.objects.filter(run=run, role=Message.Role.ASSISTANT, version__isnull=True)
        .exclude(content__isnull=True)
        .exclude(content="")
        .order_by("-index")
        .values_list("content", flat=True)
        .first()
    )
    return Untitled(conversation_id, conversation.title, first.content, reply)


async def _ask(target: Endpoint, untitled: Untitled, *, model: str) -> str | None:
    """The endpoint's title, through a client of its own: the run's is closed by now."""
    client = build_client(target)
    try:
        async with asyncio.timeout(TITLE_SECONDS):
            return await propose_title(client, untitled.first_message, untitled.reply, model=model)
    finally:
        await client.aclose()


def _save(untitled: Untitled, title: str) -> bool:
    """Whether the title was saved: not if the user renamed the conversation meanwhile (or
    deleted it). `updated_at` stays: a new title does not move a conversation in the list."""
    unchanged = Conversation.objects.filter(pk=untitled.conversation_id, title=untitled.title)
    return unchanged.update(title=title) == 1


async def publish(conversation: Conversation) -> None:
    """The page header and the sidebar link of every tab showing the conversation."""
    try:
        html = render("title", {"conversation": conversation, "oob": True})
        await broadcast(group_name(conversation.pk), html)
    except Exception:
        logger.exception("conversation %s: the new title was not pushed", conversation.pk)
