"""The admin's Usage page in the browser, on a site with prices set: a month of runs drawn as
charts with their legends, chats apart from evaluations, the day-by-day table, the breakdowns;
a bad range refused in one line. Screenshots at 1440x900 and 390x844, light and dark, with
axe."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from playwright.sync_api import Page, expect

from chat.testing.processes import DaphneServer
from chat.testing.usage_history import FIRST, busy, crafted
from tests.browser.test_screens import SCREENS, look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PRICES = "gpt-a=1/2,gpt-b=10/20"
MONTH = {"since": "2026-03-01", "until": "2026-03-30"}


@pytest.fixture(scope="module")
def priced_url(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """A daphne of its own, with AGENTLAB_MODEL_PRICES set (the shared one has none)."""
    from django.db import connection

    with DaphneServer(
        database_url=f"sqlite:///{connection.settings_dict['NAME']}",
        env={"AGENTLAB_MODEL_PRICES": PRICES, "AGENTLAB_TITLES": "off"},
    ) as server:
        yield server.url


def log_in_staff(context: Any, url: str) -> Any:
    user = get_user_model().objects.create_user(
        "root", password="pw-123456789", is_staff=True, is_superuser=True
    )
    client = Client()
    client.force_login(user)
    cookie = client.cookies["sessionid"].value
    context.add_cookies([{"name": "sessionid", "value": cookie, "url": url}])
    return user


def test_the_usage_page_draws_a_month_with_chats_apart_and_cost(
    page: Page, priced_url: str, context: Any
) -> None:
    log_in_staff(context, priced_url)
    crafted()
    busy(900, first=FIRST, days=30)
    page.goto(f"{priced_url}/admin/")
    page.get_by_role("link", name="Usage", exact=True).first.click()
    expect(page.get_by_role("heading", name="Usage", level=1)).to_be_visible()
    page.goto(f"{priced_url}/admin/chat/usage/?since={MONTH['since']}&until={MONTH['until']}")

    def check(page: Page) -> None:
        expect(page.locator(".usage-period")).to_contain_text(
            "Chats and evaluations, 1 Mar 2026 to 30 Mar 2026"
        )
        runs = page.get_by_role("img", name="Runs per day", exact=True)
        expect(runs).to_have_count(1)  # the layout that fits; the other is not displayed
        expect(runs.locator("rect.chart-chat").first).to_be_visible()
        expect(runs.locator("rect.chart-eval").first).to_be_visible()
        expect(page.get_by_role("img", name="Cost per day", exact=True)).to_have_count(1)
        latency = page.get_by_role("img", name="Run duration per day", exact=True)
        expect(latency.locator("polyline.chart-p95")).to_have_count(1)
        legend = page.locator("#chart-runs .chart-legend li")
        expect(legend).to_have_text(["Chats", "Evaluations"])
        expect(page.get_by_role("table", name="By model")).to_contain_text("gpt-b")
        expect(page.get_by_role("columnheader", name="Cost").first).to_be_visible()
        table = page.get_by_role("table", name="By tool")
        expect(table).to_contain_text("Search docs")
        phone = (page.viewport_size or {"width": 0})["width"] < 700
        wide = page.locator("#chart-runs svg.chart-wide")
        if phone:
            expect(wide).to_be_hidden()
        else:
            expect(wide).to_be_visible()
        box = page.locator(".usage").bounding_box()
        assert box is not None and box["width"] <= (page.viewport_size or {"width": 0})["width"]

    look(page, "usage", check)

    page.set_viewport_size({"width": 1440, "height": 900})
    page.emulate_media(color_scheme="light")

    page.get_by_role("radio", name="Evaluations", exact=True).check()
    page.get_by_role("button", name="Show").click()
    expect(page.locator(".usage-period")).to_contain_text("Evaluations, 1 Mar 2026")
    expect(
        page.get_by_role("img", name="Runs per day", exact=True).locator("rect.chart-chat")
    ).to_have_count(0)
    page.locator("#id_since").fill("2026-04-01")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("alert")).to_have_text("The first day comes after the last: swap them.")
    expect(page.locator("#id_since")).to_have_value("2026-04-01")
    page.screenshot(path=SCREENS / "usage-refused-desktop-light.png", full_page=True)
