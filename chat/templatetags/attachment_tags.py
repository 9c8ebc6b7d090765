"""Attached files in the pages: a sent message's files (the transcript, the admin) and what the
composer needs to attach more (where to upload, the most a message carries, the model's limit)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import template
from django.template.defaultfilters import filesizeformat
from django.urls import reverse

from chat import agents
from chat.agent.messages import MAX_ATTACHMENTS
from chat.models import Conversation, Message
from chat.runs.providers import Endpoint, conversation_endpoint, endpoint, images_refused
from chat.transcripts import attachments as stored_files
from chat.transcripts import files

register = template.Library()

NAMES = "{names}"
"""Where the composer's script puts the names of the images it holds (see `composer`)."""


@dataclass(frozen=True)
class Shown:
    """One file of a sent message: where it is served, and the facts its chip shows."""

    name: str
    kind: str
    url: str
    size_text: str
    pages: int

    @property
    def facts(self) -> str:
        """ "PDF · 3 pages · 12.3 KB", or the size alone."""
        if self.kind == "pdf":
            pages = "1 page" if self.pages == 1 else f"{self.pages:,} pages"
            return f"PDF · {pages} · {self.size_text}"
        return self.size_text


@register.filter
def attached(message: Message | None, where: str = "") -> list[Shown]:
    """A user message's files, each with the address that serves it to readers of the
    conversation (to staff with `where="admin"`)."""
    if message is None or not message.attachments:
        return []

    def url(number: int) -> str:
        if where == "admin":
            return reverse("admin:chat_message_attachment", args=[message.pk, number])
        return reverse("chat:attachment", args=[message.conversation_id, message.pk, number])

    return [
        Shown(
            name=value.name,
            kind=value.kind,
            url=url(number),
            size_text=filesizeformat(value.size),
            pages=value.pages,
        )
        for number, value in enumerate(stored_files.stored_values(message.attachments), 1)
    ]


@register.simple_tag
def composer(conversation: Conversation | None = None, user: Any = None) -> dict[str, Any]:
    """The composer's attachment settings. On a conversation: its upload address. On a
    conversation, or on the first screen of `user` (whose new conversation starts from their
    default agent): the line shown while it holds images for a model known to take none (the
    script names the images)."""
    found: dict[str, Any] = {
        "max": MAX_ATTACHMENTS,
        "max_bytes": files.max_bytes(),
        "limit_text": files.size_text(files.max_bytes()),
        "accepted": files.ACCEPTED,
    }
    target: Endpoint | None = None
    if conversation is not None and conversation.pk:
        found["upload_url"] = reverse("chat:attachment_upload", args=[conversation.pk])
        target = conversation_endpoint(conversation)
    elif user is not None:
        try:
            chosen = agents.configuration(agents.default_version(user))
        except agents.AgentRefused:
            chosen = None  # the first message says why; nothing to warn of before it
        if chosen is not None:
            target = endpoint(chosen.profile, model=chosen.parameters.model)
    if target is not None and target.takes_images is False:
        found["images_refused"] = images_refused(target.label, [NAMES])
    return found
