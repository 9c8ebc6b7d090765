"""Login throttling (django-axes): failures lock one username on one address, the login page says
so, and the lock lifts after the cool-off."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db.models import F
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

PASSWORD = "pw-123456789"
LOCKED = "Too many failed attempts to log in. Try again in 15\xa0minutes."
LOGIN = reverse("login")
ADMIN_LOGIN = reverse("admin:login")


@pytest.fixture
def ada() -> Any:
    return get_user_model().objects.create_user("ada", password=PASSWORD)


def log_in(
    client: Client, username: str, password: str, *, url: str = LOGIN, address: str = "10.0.0.1"
) -> Any:
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)


def fail(client: Client, username: str, times: int, **where: str) -> list[Any]:
    return [log_in(client, username, "wrong password", **where) for _ in range(times)]


def logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_the_defaults_are_five_failures_and_a_quarter_of_an_hour() -> None:
    assert settings.AXES_FAILURE_LIMIT == 5
    assert settings.AXES_COOLOFF_TIME.total_seconds() == 15 * 60


def test_five_failures_lock_the_login_and_then_the_right_password_is_refused(
    client: Client, ada: Any
) -> None:
    *before, fifth = fail(client, "ada", 5)

    assert [r.status_code for r in before] == [200] * 4
    assert all("didn't match" in r.content.decode() for r in before)
    assert fifth.status_code == 429

    response = log_in(client, "ada", PASSWORD)

    assert response.status_code == 429
    assert response["Retry-After"] == "900"
    page = response.content.decode()
    assert f'<p class="error" role="alert">{LOCKED}</p>' in page
    assert "<title>Log in · Agent Lab</title>" in page
    assert 'name="username" value="ada"' in page
    assert not logged_in(client)


def test_the_lock_is_for_that_username_on_that_address_only(client: Client, ada: Any) -> None:
    get_user_model().objects.create_user("bob", password=PASSWORD)
    fail(client, "ada", 5)

    assert log_in(Client(), "bob", PASSWORD).status_code == 302
    assert log_in(Client(), "ada", PASSWORD, address="10.0.0.2").status_code == 302
    assert log_in(Client(), "ada", PASSWORD).status_code == 429


def test_the_admin_login_is_locked_too(client: Client) -> None:
    get_user_model().objects.create_user("root", password=PASSWORD, is_staff=True)
    *_, fifth = fail(client, "root", 5, url=ADMIN_LOGIN)

    response = log_in(client, "root", PASSWORD, url=f"{ADMIN_LOGIN}?next=/admin/")

    assert fifth.status_code == response.status_code == 429
    assert LOCKED in response.content.decode()
    assert 'name="next" value="/admin/"' in response.content.decode()
    assert not logged_in(client)


def travel(minutes: float) -> None:
    """As if the attempts so far were `minutes` older."""
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(minutes=minutes))


def test_the_lock_lasts_the_cool_off_from_the_last_attempt(client: Client, ada: Any) -> None:
    fail(client, "ada", 5)
    travel(10)
    assert log_in(client, "ada", PASSWORD).status_code == 429  # and the wait starts again
    travel(10)
    assert log_in(client, "ada", PASSWORD).status_code == 429
    travel(15)

    response = log_in(client, "ada", PASSWORD)

    assert response.status_code == 302 and logged_in(client)


def test_an_admin_can_lift_a_lock_early(client: Client, ada: Any) -> None:
    fail(client, "ada", 5)

    call_command("axes_reset_username", "ada", stdout=StringIO())

    assert log_in(client, "ada", PASSWORD).status_code == 302


def test_a_success_before_the_limit_starts_the_count_again(client: Client, ada: Any) -> None:
    fail(client, "ada", 4)
    assert log_in(Client(), "ada", PASSWORD).status_code == 302

    assert [r.status_code for r in fail(client, "ada", 4)] == [200] * 4


def test_the_limit_comes_from_the_settings(client: Client, ada: Any, settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 2

    assert [r.status_code for r in fail(client, "ada", 2)] == [200, 429]
