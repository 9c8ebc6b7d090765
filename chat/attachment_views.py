"""Attachments over HTTP: a file uploaded to a conversation's composer, and a sent file served to
whoever may read the conversation (never at a public URL)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404
from django.template.defaultfilters import filesizeformat
from django.views.decorators.http import require_GET, require_POST

from chat import access, agent, media, runs
from chat.access import Action
from chat.models import Message
from chat.transcripts import attachments as stored_files
from chat.transcripts import files

INLINE = frozenset(files.IMAGE_TYPES.values())
"""Served to be shown in the page: the image types a model takes. Anything else downloads."""
_FORM_SLACK = 64 * 1024
"""What a multipart body carries beside the file (boundaries, headers, the CSRF token)."""


@login_required
@require_POST
def upload(request: HttpRequest, pk: int) -> HttpResponse:
    """One file for the composer of a conversation its owner writes in: the gate's verdict as
    JSON, with the token the send frame carries (`{"error": line}` with status 400 if refused)."""
    conversation = access.conversation(request.user, Action.WRITE, pk)
    length = int(request.META.get("CONTENT_LENGTH") or 0)
    if length > files.max_bytes() + _FORM_SLACK:
        # Refused before the body is parsed: an oversized file is never stored.
        limit = files.size_text(files.max_bytes())
        return _refused(f"The file is {files.size_text(length)}; the limit is {limit}.")
    upload = request.FILES.get("file")
    if upload is None:
        return _refused("Choose a file to attach.")
    try:
        name = files.checked_name(upload.name or "")
        files.check_size(name, upload.size or 0)
        value = stored_files.store(files.admit(name, upload.read(), upload.content_type or ""))
    except files.Refused as exc:
        return _refused(str(exc))
    return JsonResponse(
        {
            "token": stored_files.token(conversation.owner_id, conversation.pk, value),
            "name": value.name,
            "kind": value.kind,
            "content_type": value.content_type,
            "size": value.size,
            "size_text": filesizeformat(value.size),
            "pages": value.pages,
        }
    )


def first_message(request: HttpRequest, content: str | None) -> tuple[agent.Attachment, ...]:
    """The first screen's files (its form's `attachments` field), each through the gate and
    into storage, checked with the message they go with; RunRefused with the first line."""
    uploads = request.FILES.getlist("attachments")
    admitted = []
    try:
        files.check_count(len(uploads))
        for upload in uploads:
            name = files.checked_name(upload.name or "")
            files.check_size(name, upload.size or 0)
            admitted.append(files.admit(name, upload.read(), upload.content_type or ""))
    except files.Refused as exc:
        raise runs.RunRefused(str(exc)) from None
    if content is not None:
        runs.check_message(content, [item.attachment for item in admitted])
    # Stored once every file passed: a refused form leaves no file behind.
    return tuple(stored_files.store(item) for item in admitted)


def _refused(line: str) -> JsonResponse:
    return JsonResponse({"error": line}, status=400)


@login_required
@require_GET
def attachment(request: HttpRequest, pk: int, message_pk: int, number: int) -> HttpResponseBase:
    """The `number`th file (from 1) of a message, to whoever may read its conversation."""
    conversation = access.conversation(request.user, Action.READ, pk)
    message = get_object_or_404(
        Message.objects.only("pk", "attachments"), pk=message_pk, conversation=conversation
    )
    return serve(message, number)


def serve(message: Message, number: int) -> HttpResponseBase:
    """A message's file as a response: an image shown inline, anything else downloaded; the
    type as the gate found it, never sniffed by the browser."""
    values = stored_files.stored_values(message.attachments)
    if not 1 <= number <= len(values):
        raise Http404("No such attachment.")
    value = values[number - 1]
    try:
        handle = stored_files.open_file(value)
    except OSError:
        raise Http404("This file is no longer stored.") from None
    inline = value.content_type in INLINE
    response = FileResponse(
        handle,
        as_attachment=not inline,
        filename=value.name,
        content_type=value.content_type if inline else _download_type(value.content_type),
    )
    return media.confined(response)


def _download_type(content_type: str) -> str:
    """A text file goes as what it is, with its charset; a PDF as a PDF."""
    if content_type.startswith("text/") or content_type.startswith("application/json"):
        return f"{content_type}; charset=utf-8"
    return content_type
