from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

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
