"""The conversation header's sharing: "Continue in my own copy" for a teammate reading a
shared conversation (the share switch itself is `views.conversation_share`, the one rule)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from chat import access
from chat.access import Action
from chat.models import Conversation
from chat.transcripts import forks


def reading_point(conversation: Conversation, before: str) -> int | None:
    """The last message the reader has in front of them: the latest, or the last before
    message `before` when they read an earlier window (None: no message yet)."""
    rows = conversation.messages.active()
    if before.isdigit() and len(before) < 10:
        rows = rows.filter(index__lt=int(before))
    return rows.order_by("-index").values_list("index", flat=True).first()


@login_required
@require_POST
def conversation_copy(request: HttpRequest, pk: int) -> HttpResponse:
    """A fork owned by whoever asks, through the point they were reading (a tool round is never
    cut in half); the conversation they read is not changed. A refusal comes back to its page
    in one line."""
    conversation = access.conversation(request.user, Action.COPY, pk)
    point = reading_point(conversation, request.POST.get("before", ""))
    if point is None:
        messages.error(request, "No copy was made: this conversation has no messages yet.")
        return redirect("chat:conversation_detail", conversation.pk)
    try:
        copy = forks.fork_conversation(conversation, owner=request.user, at_message=point)
    except ValueError as exc:
        messages.error(request, f"No copy was made: {exc}")
        return redirect("chat:conversation_detail", conversation.pk)
    messages.success(
        request,
        f"This is your own copy of “{conversation}” through message {copy.forked_at}: "
        "write in it as you like; the original stays as it is.",
    )
    return redirect("chat:conversation_detail", copy.pk)
