"""Tests of chat.admin.usage: the admin's Usage page is staff's (who may view runs), reached
from the admin's index; its charts are accessible SVG without inline style; cost columns show
only where a price is set; bad dates are one line and keep what was typed; a page costs the
same queries for a few runs or thousands."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from chat.testing import factories as make
from chat.testing.usage_history import FIRST, LAST, PRICES, busy, crafted

pytestmark = pytest.mark.django_db

URL = "/admin/chat/usage/"
RANGE = {"since": FIRST.isoformat(), "until": LAST.isoformat(), "kind": "all"}


def page(client: Client, **query: str) -> str:
    response = client.get(URL, query)
    assert response.status_code == 200
    return response.text


def test_the_page_lives_in_the_admin_and_is_linked_from_its_index(staff: Client) -> None:
    assert reverse("admin:chat_usage") == URL
    index = staff.get("/admin/").text
    assert f'<a href="{URL}">Usage</a>' in index
    assert f'<a href="{URL}">Usage</a>' in staff.get("/admin/chat/").text
    assert "<h1>Usage</h1>" in page(staff)


def test_anonymous_users_go_to_the_login_and_users_without_staff_too(client: Client) -> None:
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    client.force_login(make.user("ada"))
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_staff_who_may_not_view_runs_are_refused_and_not_shown_the_link(client: Client) -> None:
    clerk = make.user("clerk", is_staff=True)
    clerk.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    client.force_login(clerk)
    assert client.get(URL).status_code == 403
    assert "Usage" not in client.get("/admin/").text
    clerk.user_permissions.add(Permission.objects.get(codename="view_run"))
    assert client.get(URL).status_code == 200


def test_the_figures_of_the_period_with_chats_and_evaluations_apart(staff: Client) -> None:
    crafted()
    text = page(staff, **RANGE)
    assert "Chats and evaluations, 1 Mar 2026 to 3 Mar 2026" in text
    assert re.search(
        r"<dt>Runs</dt><dd><span class=\"usage-figure\">5</span>"
        r"<span class=\"usage-note\">4 in chats, 1 in evaluations</span>",
        text,
    )
    assert "40% of runs" in text  # 2 failed of 5
    assert "50% failed" in text  # tool calls: 2 errors of the 4 that ended
    assert '<th scope="row">Support v1</th>' in text
    assert 'Search docs<span class="usage-note">docs__search_docs · MCP server docs</span>' in text
    for name in ("runs", "tokens", "failures", "tool-errors", "latency", "tool-latency"):
        assert f'id="chart-{name}"' in text
    assert 'id="chart-cost"' not in text
    assert "AGENTLAB_MODEL_PRICES" in text  # says how to see cost

    chats = page(staff, **{**RANGE, "kind": "chat"})
    assert "Chats, 1 Mar 2026 to 3 Mar 2026" in chats
    assert "Failed evaluation runs" not in chats
    assert "Failed evaluation runs" in text


def test_cost_columns_only_where_a_price_is_set(staff: Client, settings: Any) -> None:
    crafted()
    assert '<th scope="col">Cost</th>' not in page(staff, **RANGE)
    settings.AGENTLAB_MODEL_PRICES = PRICES
    text = page(staff, **RANGE)
    assert '<th scope="col">Cost</th>' in text
    assert 'id="chart-cost"' in text
    assert "15 tokens unpriced" in text  # the scripted model's
    assert '<span class="usage-figure">0.04</span>' in text  # 0.0381 in all
    assert "no price set" in text


def test_charts_are_images_with_a_title_a_description_and_no_inline_style(staff: Client) -> None:
    crafted()
    text = page(staff, **RANGE)
    assert "style=" not in text.split("<body", 1)[1]
    assert "<script>" not in text
    svg = re.search(r'<svg class="chart-svg chart-wide"[^>]*>', text)
    assert svg is not None
    assert 'role="img"' in svg.group(0)
    assert 'aria-labelledby="chart-runs-wide-title"' in svg.group(0)
    assert 'aria-describedby="chart-runs-wide-desc"' in svg.group(0)
    assert '<title id="chart-runs-wide-title">Runs per day</title>' in text
    assert "Chats: 4 in all; Evaluations: 1 in all." in text
    assert '<caption id="usage-table-days">Day by day</caption>' in text


def test_bad_dates_are_one_line_and_keep_what_was_typed(staff: Client) -> None:
    text = page(staff, since="2026-03-09", until="2026-03-01", kind="all")
    assert "The first day comes after the last: swap them." in text
    assert 'value="2026-03-09"' in text and 'value="2026-03-01"' in text
    assert 'id="chart-runs"' not in text

    text = page(staff, since="2024-01-01", until="2026-03-01", kind="chat")
    assert "A range of at most 366 days, please (this one has 791)." in text
    assert "Enter a valid date." in page(staff, since="yesterday", until="2026-03-01", kind="all")
    assert "Select a valid choice." in page(staff, **{**RANGE, "kind": "everything"})


def test_the_default_is_the_last_30_days_of_everything(staff: Client) -> None:
    text = page(staff)
    assert "Chats and evaluations," in text
    assert "checked" in re.search(r'<input[^>]*value="all"[^>]*>', text).group(0)  # type: ignore[union-attr]
    assert "Last 7 days" in text and "Last 365 days" in text


def test_the_page_costs_the_same_queries_for_a_few_runs_or_thousands(staff: Client) -> None:
    crafted()
    page(staff, **RANGE)  # sessions and the like, once
    with CaptureQueriesContext(connection) as few:
        page(staff, **RANGE)
    busy(2_000, first=FIRST, days=3)
    with CaptureQueriesContext(connection) as many:
        text = page(staff, **RANGE)
    assert len(many) == len(few)
    assert "2,005" in text


def test_what_the_query_leaves_out_takes_its_default(staff: Client) -> None:
    crafted()
    text = page(staff, until=LAST.isoformat())
    assert "Chats and evaluations, 2 Feb 2026 to 3 Mar 2026" in text
    assert re.search(r'<input[^>]*value="all"[^>]*checked', text)
    assert 'value="2026-02-02"' in text


def test_names_from_runs_and_tools_are_escaped(staff: Client) -> None:
    from chat.testing.usage_history import at, call, run

    owner = make.user("<i>eve</i>")
    made = run(make.conversation(owner), at(FIRST), model="<b>m</b>", duration=1.0, user=owner)
    call(made, "<img src=x onerror=alert(1)>", status="failed", failure="tool_error", duration=1)
    text = page(staff, **RANGE)
    assert "<b>m</b>" not in text and "&lt;b&gt;m&lt;/b&gt;" in text
    assert "<i>eve</i>" not in text and "&lt;i&gt;eve&lt;/i&gt;" in text
    assert "<img src=x" not in text
