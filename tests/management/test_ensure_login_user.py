"""Tests of manage.py ensure_login_user."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command
from django.test import RequestFactory

pytestmark = pytest.mark.django_db


def run() -> str:
    out = StringIO()
    call_command("ensure_login_user", stdout=out)
    return out.getvalue()


def test_generates_a_password_once_and_it_works() -> None:
    first = run()
    match = re.search(r"password: (\S+)", first)
    assert match is not None
    password = match.group(1)
    assert len(password) >= 16
    # django-axes checks every login attempt: authenticate needs the request.
    request = RequestFactory().post("/login/")
    assert authenticate(request, username="admin", password=password) is not None

    second = run()
    assert password not in second and "set earlier" in second
    assert get_user_model().objects.filter(is_superuser=True).count() == 1


def test_two_installs_get_different_passwords() -> None:
    first = re.search(r"password: (\S+)", run())
    get_user_model().objects.all().delete()
    second = re.search(r"password: (\S+)", run())
    assert first and second and first.group(1) != second.group(1)
