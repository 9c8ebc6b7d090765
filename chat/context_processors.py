"""What every page's template needs from the request."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from chat import sidebar as lists

THEMES = ("system", "light", "dark")
THEME_COOKIE = "theme"


def theme(request: HttpRequest) -> dict[str, str]:
    """The colour theme the reader chose (a cookie the page sets), so the page is drawn in it
    from the first paint: system, light or dark."""
    chosen = request.COOKIES.get(THEME_COOKIE, "")
    return {"theme": chosen if chosen in THEMES else "system"}


def sidebar(request: HttpRequest) -> dict[str, Any]:
    """The lists every page's sidebar shows: the user's own conversations (of which it shows
    the latest page, under those they pinned) and the latest page of those the team shares
    with them. Lazy: a page without a sidebar runs no query."""
    user = getattr(request, "user", None)
    return {
        "conversations": lists.listed(user, lists.MINE),
        "pinned": SimpleLazyObject(lambda: lists.pinned(user)),
        "shared_page": SimpleLazyObject(lambda: lists.page(lists.listed(user, lists.SHARED))),
    }
