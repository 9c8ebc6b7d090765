"""The login page: in the app's look, light and dark; one error line for wrong credentials;
a locked-out login told why and for how long."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-123456789"


def log_in(page: Page, password: str) -> None:
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def test_a_locked_out_login_is_told_why_on_the_login_page(page: Page, live_server_url: str) -> None:
    get_user_model().objects.create_user("ada", password=PASSWORD)
    page.goto(f"{live_server_url}/login/")
    for _ in range(5):
        log_in(page, "wrong password")

    log_in(page, PASSWORD)

    expect(page).to_have_title("Log in · Agent Lab")
    expect(page.get_by_role("alert")).to_have_text(
        "Too many failed attempts to log in. Try again in 15\xa0minutes."
    )
    expect(page.get_by_label("Username")).to_have_value("ada")
    expect(page.get_by_role("button", name="Log in")).to_be_visible()
    assert page.url.endswith("/login/")


def test_the_login_page_is_the_apps_own(page: Page, live_server_url: str) -> None:
    page.goto(f"{live_server_url}/login/")

    def check(page: Page) -> None:
        expect(page.get_by_role("heading", name="Log in", level=1)).to_be_visible()
        expect(page.get_by_label("Username")).to_be_focused()
        expect(page.get_by_label("Theme")).to_be_visible()
        expect(page.get_by_role("alert")).to_have_count(0)

    look(page, "login", check)


def test_wrong_credentials_get_one_error_line(page: Page, live_server_url: str) -> None:
    names = (f"someone-{n}" for n in range(10))  # each tried twice at most: no lock-out

    def check(page: Page) -> None:
        page.goto(f"{live_server_url}/login/")
        page.get_by_label("Username").fill(next(names))
        page.get_by_label("Password").fill("wrong password")
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("alert")).to_have_text(
            "Your username and password didn't match. Please try again."
        )
        expect(page.locator(".errorlist")).to_have_count(0)
        expect(page.get_by_text("didn't match")).to_have_count(1)
        expect(page.get_by_label("Password")).to_have_value("")

    page.goto(f"{live_server_url}/login/")
    look(page, "login-error", check)
