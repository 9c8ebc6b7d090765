"""A locked-out login gets the login page saying why and for how long, not axes' bare text."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.timesince import timeuntil


def locked_out(request: HttpRequest, *args: Any) -> HttpResponse:
    """django-axes' AXES_LOCKOUT_CALLABLE for the login page and the admin's: status 429.

    axes calls it with (request, response, credentials), or (request, credentials) from its
    async middleware: only the request is used.
    """
    cool_off = settings.AXES_COOLOFF_TIME
    now = timezone.now()
    # Every attempt during the lock-out starts the cool-off again, this one too.
    wait = timeuntil(now + cool_off, now)
    response = render(
        request,
        "registration/login.html",
        {
            "form": AuthenticationForm(request, initial={"username": request.POST.get("username")}),
            "next": request.POST.get("next") or request.GET.get("next", ""),
            "locked_out": wait,
        },
        status=429,
    )
    response["Retry-After"] = str(int(cool_off.total_seconds()))
    return response
