"""A conversation a window at a time: the page shows the latest turns, "Show earlier messages"
brings the window before them in place, and a link to a message opens the window that holds it.

A window is a stretch of the active path by message index (chat.turns.Window): the page, the
earlier windows and the live frames all render turns with the same partials.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render

from chat import access, waiting
from chat.access import Action
from chat.models import Conversation
from chat.turns import Turn, Window, conversation_turns, turn_for_run, window_at, window_before


def _index(query: QueryDict, name: str) -> int | None:
    value = query.get(name, "")
    return int(value) if value.isdigit() and len(value) < 10 else None


def requested(conversation: Conversation, query: QueryDict) -> Window:
    """The window a page's query asks for: `at` a message (a link to `#message-N`), `run` (a
    run's turn), `before` a message (the earlier window, without script), else the latest (which
    a link into it opens too)."""
    at = _index(query, "at")
    run = _index(query, "run")
    if at is None and run is not None:
        first = conversation.messages.active().filter(run_id=run).values_list("index", flat=True)
        at = first.first()
    if at is None:
        return window_before(conversation, _index(query, "before"))
    latest = window_before(conversation)
    return latest if at >= latest.start else window_at(conversation, at)


def page(conversation: Conversation, query: QueryDict) -> dict[str, Any]:
    """The conversation page's turns and run state for the window `query` asks for.

    An older window than the latest has no live reply in it: the run state comes from the run
    in progress, read on its own, and the live frames go to a hidden sink (the page says a reply
    streams below and links to the latest)."""
    window = requested(conversation, query)
    turns = conversation_turns(conversation, window)
    live: list[Turn] = turns
    if not window.latest:
        live = [turn_for_run(run) for run in conversation.runs.active()]
    return {
        "turns": turns,
        "window": window,
        "running": any(turn.is_active for turn in live),
        # The socket's catch-up snapshot is of the live reply, which only the latest shows.
        "live_run": next((t.run.pk for t in live if t.is_active and t.run and window.latest), None),
        "waiting": waiting.waiting_tools(live),
    }


@login_required
def conversation_window(request: HttpRequest, pk: int) -> HttpResponse:
    """The window before message `before`, for "Show earlier messages": its turns, and the
    button for the one before it."""
    conversation = access.conversation(request.user, Action.READ, pk)
    before = _index(request.GET, "before")
    if before is None:
        raise Http404("Which messages? Give `before`, a message index.")
    window = window_before(conversation, before)
    context = {
        "conversation": conversation,
        "turns": conversation_turns(conversation, window),
        "window": window,
        "announce": f"Messages {window.start} to {before - 1} shown above.",
    }
    return render(request, "chat/conversation.html#earlier-window", context)
