"""What every page's template needs from the request."""

from __future__ import annotations

from django.http import HttpRequest

THEMES = ("system", "light", "dark")
THEME_COOKIE = "theme"


def theme(request: HttpRequest) -> dict[str, str]:
    """The colour theme the reader chose (a cookie the page sets), so the page is drawn in it
    from the first paint: system, light or dark."""
    chosen = request.COOKIES.get(THEME_COOKIE, "")
    return {"theme": chosen if chosen in THEMES else "system"}
