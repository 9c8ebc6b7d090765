"""Download a conversation: Markdown for people, and the export formats of
`manage.py export_transcripts` (one conversation's line of it) for tools.

Whoever may read a conversation may download it: its owner, and the team when it is shared.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpRequest, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect
from django.utils.http import content_disposition_header
from django.utils.text import slugify
from django.views.decorators.http import require_GET

from chat import access
from chat.access import Action
from chat.models import Conversation
from chat.transcripts import export, markdown
from chat.transcripts.records import ExportRefused

BATCH = 64 * 1024
"""Characters sent at a time: a long conversation goes out in pieces, never whole."""


@dataclass(frozen=True)
class Format:
    label: str
    suffix: str
    content_type: str
    full: bool = False


FORMATS = {
    "markdown": Format("Markdown", ".md", "text/markdown; charset=utf-8"),
    "openai": Format("JSON (openai)", ".openai.json", "application/json"),
    "full": Format("JSON (full)", ".full.json", "application/json", full=True),
}


def filename(conversation: Conversation, kind: str) -> str:
    """`trip-planning-12.md`: the title made safe for any file system, and the id."""
    stem = slugify(str(conversation), allow_unicode=True)[:80].strip("-_") or "conversation"
    return f"{stem}-{conversation.pk}{FORMATS[kind].suffix}"


def pieces(conversation: Conversation, kind: str) -> Iterator[str]:
    """The file's text in pieces. Raises ExportRefused (openai) before the first one."""
    if kind == "markdown":
        return markdown.document(conversation, export.active_rows(conversation))
    texts = export.full_text(conversation) if kind == "full" else export.openai_text(conversation)
    return _line(texts)


def _line(texts: Iterator[str]) -> Iterator[str]:
    yield from texts
    yield "\n"


def _batches(texts: Iterator[str]) -> Iterator[bytes]:
    while batch := _batch(texts):
        yield batch


def _batch(texts: Iterator[str]) -> bytes:
    taken: list[str] = []
    size = 0
    for text in texts:
        taken.append(text)
        size += len(text)
        if size >= BATCH:
            break
    return "".join(taken).encode()


async def _pulled(texts: Iterator[str]) -> AsyncIterator[bytes]:
    """Batches read in the request's thread (its database connection), sent as they come."""
    while batch := await sync_to_async(_batch, thread_sensitive=True)(texts):
        yield batch


@login_required
@require_GET
def conversation_download(request: HttpRequest, pk: int, kind: str) -> HttpResponseBase:
    """The conversation as a file (Content-Disposition: attachment). A refused JSON (openai)
    export (a run in progress, a history that breaks the strict rules, no messages) comes
    back to the page with the reason."""
    chosen = FORMATS.get(kind)
    if chosen is None:
        raise Http404("No such format: choose markdown, openai or full.")
    fetched = Conversation.objects.for_export(full=chosen.full).select_related(
        "agent_version__agent"
    )
    conversation = access.conversation(request.user, Action.READ, pk, fetched)
    try:
        texts = pieces(conversation, kind)
    except ExportRefused as exc:
        messages.error(request, f"{chosen.label} was not downloaded: {exc}.")
        return redirect("chat:conversation_detail", conversation.pk)
    # Under ASGI, Django reads a synchronous iterator whole before it sends a byte.
    body = _pulled(texts) if isinstance(request, ASGIRequest) else _batches(texts)
    response = StreamingHttpResponse(body, content_type=chosen.content_type)
    response["Content-Disposition"] = content_disposition_header(True, filename(conversation, kind))
    response["X-Content-Type-Options"] = "nosniff"
    return response
