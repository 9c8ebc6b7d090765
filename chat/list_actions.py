"""What the owner does to a conversation from its line in the list: pin it on top, archive it
out of the list (and out of the default search), or delete it; and the archived list itself.

None of these changes `updated_at`: a conversation keeps its place among the others by date
(its rows are updated with `QuerySet.update`, which leaves `auto_now` alone).

Deleting with an undo: the page hides the line and says "Deleted · Undo" for a few seconds, and
only then (or at the reader's next action, or as the page is left) asks for the delete, with
`confirmed`. The delete itself is immediate and final: restoring a conversation with its
messages, versions, runs, tool calls and model calls would mean keeping a second copy of
everything, or a deleted-at marker every query in the site would have to honour. A tab closed
during the undo window (or a request that never arrives) keeps the conversation: the one way
this design fails loses nothing.

The list's lines carry no buttons: the page has one menu, which its script puts under the line
asked for (static/js/list.js), so that a line costs its link alone. Without script the same
actions are on the conversation's own page (its sidebar's "Rename, share or delete") and in the
archived list; there, Delete asks on a page of its own.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from chat import access, search, sidebar
from chat.models import Conversation

CHANGES: dict[str, dict[str, Any]] = {
    "pin": {"pinned_at": True, "archived_at": None},
    "unpin": {"pinned_at": None},
    "archive": {"archived_at": True, "pinned_at": None},
    "unarchive": {"archived_at": None},
}
"""The fields each action sets; True stands for now. Archiving unpins, pinning unarchives."""
DONE = {
    "pin": "Pinned “{}”.",
    "unpin": "Unpinned “{}”.",
    "archive": "Archived “{}”: find it under Archived conversations.",
    "unarchive": "“{}” is back in the list.",
    "delete": "Deleted “{}”.",
}
RUNNING = "A run is in progress: stop it before deleting the conversation."
NOT_UNDERSTOOD = (
    "Say one action and the conversation's number: pin=N, unpin=N, archive=N, unarchive=N or "
    "delete=N."
)


def change(conversation: Conversation, do: str) -> None:
    """Pin, unpin, archive or unarchive, leaving `updated_at` (the list's order) as it was."""
    now = timezone.now()
    fields = {name: now if value is True else value for name, value in CHANGES[do].items()}
    Conversation.objects.filter(pk=conversation.pk).update(**fields)
    for name, value in fields.items():
        setattr(conversation, name, value)


def _back(request: HttpRequest) -> str:
    """Where a page without script goes back to: the page the action came from, if it is ours."""
    referer = request.headers.get("Referer", "")
    safe = url_has_allowed_host_and_scheme(
        referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return referer if safe and referer else reverse("chat:conversation_list")


@login_required
@require_POST
def list_action(request: HttpRequest) -> HttpResponse:
    """Pin, unpin, archive, unarchive or delete a conversation: the line's button names the
    action and carries the conversation's id (`pin=12`). Its owner's alone (`chat.access`,
    configure). The list's script gets the list as it is now (or, for a delete, nothing); a
    page without script goes back where it was, with a line saying what was done."""
    asked = [(do, request.POST[do]) for do in DONE if do in request.POST]
    if len(asked) != 1 or not asked[0][1].isdecimal() or len(asked[0][1]) > 18:
        return _refused(NOT_UNDERSTOOD, 400)
    do, pk = asked[0]
    conversation = access.conversation(request.user, access.Action.CONFIGURE, int(pk))
    script = request.headers.get("HX-Request") == "true"
    if do == "delete":
        if request.POST.get("confirmed") != "1":
            return render(request, "chat/list_delete.html", {"conversation": conversation})
        if conversation.has_unfinished_run():
            if script:
                return _refused(RUNNING, 409)
            messages.error(request, RUNNING)
            return redirect("chat:conversation_detail", conversation.pk)
        title = str(conversation)
        conversation.delete()
        if script:
            return HttpResponse(status=204)
        messages.success(request, DONE[do].format(title))
        return redirect("chat:conversation_list")
    change(conversation, do)
    if script:
        current = request.POST.get("current", "")
        context = {"current": int(current) if current.isdecimal() else None}
        return render(request, "chat/sidebar.html#conversation-list", context)
    messages.success(request, DONE[do].format(conversation))
    return redirect(_back(request))


def _refused(text: str, status: int) -> HttpResponse:
    return HttpResponse(text, status=status, content_type="text/plain; charset=utf-8")


@login_required
@require_GET
def archived(request: HttpRequest) -> HttpResponse:
    """The owner's archived conversations, most recent first a page at a time, or those of them
    a search finds (`q`): archived ones are out of the sidebar's search."""
    query = request.GET.get("q", "")
    if search.terms(query):
        found = search.search(search.searched(request.user, archived=True), query)
        context: dict[str, Any] = {"results": found, "query": query}
    else:
        context = {"page": sidebar.page(sidebar.listed(request.user, sidebar.ARCHIVED))}
    return render(request, "chat/archived.html", context)
