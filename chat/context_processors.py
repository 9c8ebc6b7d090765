"""What every page's template needs from the request."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from chat import access
from chat.models import Conversation

THEMES = ("system", "light", "dark")
THEME_COOKIE = "theme"


def theme(request: HttpRequest) -> dict[str, str]:
    """The colour theme the reader chose (a cookie the page sets), so the page is drawn in it
    from the first paint: system, light or dark."""
    chosen = request.COOKIES.get(THEME_COOKIE, "")
    return {"theme": chosen if chosen in THEMES else "system"}


def sidebar(request: HttpRequest) -> dict[str, Any]:
    """The conversation list every page's sidebar shows: the user's own, and those the team
    shares with them. Lazy: a page without a sidebar runs no query."""
    user = getattr(request, "user", None)
    chats = Conversation.objects.chats()
    return {
        "conversations": access.conversations(user, access.Action.WRITE, chats),
        "shared_conversations": access.shared_with(user, chats.select_related("owner")),
    }
