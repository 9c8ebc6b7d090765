"""The media of an MCP tool result (images, sounds, resources) as a person is shown them.

The data stays in the stored raw result; the page links here. Raster images and audio are
shown inline; anything else (an SVG, a zip, a PDF) is a download, never rendered by the site.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_GET

from chat import access
from chat.access import Action
from chat.agent import mcp_content
from chat.models import ToolCall

INLINE = frozenset(
    {"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp"}
    | {"audio/wav", "audio/x-wav", "audio/wave", "audio/mpeg", "audio/mp3", "audio/ogg"}
    | {"audio/webm", "audio/mp4", "audio/aac", "audio/flac"}
)


def shown_inline(item: mcp_content.Media) -> bool:
    return item.mime_type.lower() in INLINE


def file_name(item: mcp_content.Media, number: int) -> str:
    """A download's name: the last part of its URI, else one made of the call and its type."""
    parts = urlsplit(item.uri)
    name = posixpath.basename((parts.path or parts.netloc).rstrip("/"))
    name = "".join(c for c in name if c.isalnum() or c in "._-")[:100]
    return name or f"{item.kind}-{number}"


@login_required
@require_GET
def tool_call_media(request: HttpRequest, pk: int, tool_call_pk: int, number: int) -> HttpResponse:
    """The `number`th medium (from 1) of a tool call's result, to whoever may read it."""
    conversation = access.conversation(request.user, Action.READ, pk)
    call = get_object_or_404(
        ToolCall.objects.only("pk", "raw_result"), pk=tool_call_pk, run__conversation=conversation
    )
    return serve(call, number)


def serve(call: ToolCall, number: int) -> HttpResponse:
    """The response for a call's `number`th medium; 404 if it has none such."""
    found = mcp_content.media(call.raw_result or {})
    if not 1 <= number <= len(found):
        raise Http404("No such medium.")
    item = found[number - 1]
    data = mcp_content.media_data(call.raw_result or {}, item.path)
    if data is None:
        raise Http404("This medium has no data.")
    inline = shown_inline(item)
    response = HttpResponse(
        data, content_type=item.mime_type if inline else "application/octet-stream"
    )
    disposition = "inline" if inline else "attachment"
    response["Content-Disposition"] = f'{disposition}; filename="{file_name(item, number)}"'
    return confined(response)


def confined[R: HttpResponseBase](response: R) -> R:
    """A file from a tool or a user, served from our origin: it runs nothing, loads nothing,
    is taken for the type we give it and is kept by the reader's browser only."""
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "private, max-age=86400"
    return response


@dataclass(frozen=True, slots=True)
class Shown:
    """A medium of a call as its details show it: numbered, with where to fetch it."""

    number: int
    item: mcp_content.Media
    inline: bool
    url: str
    file_name: str


def for_call(call: ToolCall, *, admin: bool = False) -> list[Shown]:
    """What a call's details (or, with `admin`, the admin transcript) show of its media."""
    if not call.raw_result:
        return []
    shown = []
    for number, item in enumerate(mcp_content.media(call.raw_result), start=1):
        if admin:
            url = reverse("admin:chat_toolcall_media", args=[call.pk, number])
        else:
            url = reverse("chat:tool_call_media", args=[call.run.conversation_id, call.pk, number])
        shown.append(Shown(number, item, shown_inline(item), url, file_name(item, number)))
    return shown


def calls_with_media(calls: Iterable[ToolCall]) -> dict[int, list[Shown]]:
    """The media of those `calls` whose result names any (their raw results read in one
    query, which `calls` may have deferred), for the admin transcript."""
    named = [call.pk for call in calls if call.server and f", {mcp_content.SHOWN}]" in call.result]
    if not named:
        return {}
    loaded = ToolCall.objects.filter(pk__in=named).only("pk", "raw_result")
    return {call.pk: for_call(call, admin=True) for call in loaded}
