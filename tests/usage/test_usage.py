"""Tests of chat.usage: the Usage page's figures on a crafted history whose every figure is
known (chat.testing.usage_history.crafted), chats apart from evaluations, exact percentiles,
cost only where a price is set, and the day boundaries of the server's time zone."""

from __future__ import annotations

from datetime import UTC, date, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chat import usage
from chat.testing import factories as make
from chat.testing.usage_history import FIRST, LAST, PRICES, at, busy, crafted, run
from chat.usage import Period, sums

pytestmark = pytest.mark.django_db

PERIOD = Period(FIRST, LAST, UTC)
DAY1, DAY2, DAY3 = PERIOD.days


def test_runs_tokens_and_failures_per_day_and_in_all_chats_apart_from_evaluations() -> None:
    crafted()
    found = usage.usage(PERIOD, prices={})

    total = found.total
    assert (total.runs, total.chats, total.evals) == (5, 4, 1)
    assert (total.failed, total.chat_failed, total.eval_failed) == (2, 2, 0)  # failed, interrupted
    assert (total.chat_tokens, total.eval_tokens, total.tokens) == (1865, 3300, 5165)
    assert (total.prompt_tokens, total.completion_tokens) == (4610, 555)
    first, second, third = (found.days[day] for day in PERIOD.days)
    assert (first.chats, first.evals, first.failed, first.tokens) == (2, 1, 1, 5000)
    assert (second.runs, second.tokens) == (0, 0)
    assert (third.chats, third.evals, third.failed, third.tokens) == (2, 0, 1, 165)


def test_the_kind_keeps_only_chats_or_only_evaluations() -> None:
    crafted()
    chats = usage.usage(PERIOD, "chat", prices={})
    evals = usage.usage(PERIOD, "eval", prices={})

    assert (chats.total.runs, chats.total.evals, chats.total.tokens) == (4, 0, 1865)
    assert (evals.total.runs, evals.total.chats, evals.total.tokens) == (1, 0, 3300)
    assert (chats.total_calls.calls, evals.total_calls.calls) == (4, 1)
    assert [group.name for group in evals.models] == ["gpt-b"]


def test_tool_call_errors_leave_out_denials_and_count_the_calls_that_ended() -> None:
    crafted()
    found = usage.usage(PERIOD, prices={})

    calls = found.total_calls
    assert (calls.calls, calls.finished, calls.errors) == (5, 4, 2)  # a cancelled call did not end
    assert calls.error_rate == 0.5
    assert found.day_calls[DAY1].error_rate == 2 / 4
    assert found.day_calls[DAY3].error_rate is None  # only a cancelled call
    chats = usage.usage(PERIOD, "chat", prices={})
    assert chats.total_calls.error_rate == 1 / 3  # search_cards failed; handoff_note denied
    tools = {group.detail: group for group in found.tools}
    assert tools["docs__search_docs · MCP server docs"].name == "Search docs"
    assert tools["search_cards · built in"].tally.errors == 1
    assert tools["handoff_note · built in"].tally.errors == 0


def test_percentiles_are_nearest_rank_per_day_in_all_and_per_model() -> None:
    crafted()
    found = usage.usage(PERIOD, prices={})

    assert found.latency == {50: 2.0, 95: 4.0}  # 0.5, 1, 2, 3, 4
    assert found.day_latency[DAY1] == {50: 2.0, 95: 4.0}  # 1, 2, 4
    assert found.day_latency[DAY3] == {50: 0.5, 95: 3.0}  # 0.5, 3
    assert DAY2 not in found.day_latency
    assert found.call_latency == {50: 0.2, 95: 5.0}  # 0.1, 0.2, 5; untimed calls left out
    models = {group.name: group for group in found.models}
    assert (models["gpt-a"].p50, models["gpt-a"].p95) == (1.0, 2.0)  # 0.5, 1, 2
    assert usage.usage(PERIOD, "chat", prices={}).day_latency[DAY1] == {50: 1.0, 95: 2.0}


def test_percentiles_of_a_hundred_durations_are_the_50th_and_95th() -> None:
    owner = make.user("ada")
    chat = make.conversation(owner)
    for seconds in range(100, 0, -1):
        run(chat, at(DAY2, 1, seconds // 60, seconds % 60), duration=float(seconds))
    found = usage.usage(PERIOD, prices={})
    assert found.day_latency[DAY2] == {50: 50.0, 95: 95.0}
    assert found.latency == {50: 50.0, 95: 95.0}


def test_cost_only_where_a_price_is_set() -> None:
    crafted()
    unpriced = usage.usage(PERIOD, prices={})
    assert unpriced.priced is False
    assert unpriced.total.cost is None

    found = usage.usage(PERIOD, prices=PRICES)
    assert found.priced is True
    # gpt-a: 1600 prompt, 250 completion at 1 and 2 a million; gpt-b: 3000 and 300 at 10 and 20
    assert found.total.chat_cost == Decimal("0.0021")
    assert found.total.eval_cost == Decimal("0.036")
    assert found.total.cost == Decimal("0.0381")
    assert found.total.unpriced_tokens == 15  # the scripted model's
    assert found.days[DAY2].cost is None
    models = {group.name: group for group in found.models}
    assert models["Scripted model (offline)"].tally.cost is None
    assert models["Scripted model (offline)"].detail == "no price set"
    assert models["gpt-b"].tally.cost == Decimal("0.036")


def test_breakdowns_by_user_and_agent_version_busiest_first() -> None:
    crafted()
    found = usage.usage(PERIOD, prices={})

    assert [(g.name, g.tally.runs, g.tally.failed) for g in found.users] == [
        ("ada", 3, 1),
        ("bob", 2, 1),
    ]
    assert [(g.name, g.tally.runs, g.tally.chats, g.tally.evals) for g in found.agents] == [
        ("Support v1", 3, 2, 1),
        ("Default", 2, 2, 0),
    ]
    assert [g.name for g in found.models] == ["gpt-a", "Scripted model (offline)", "gpt-b"]
    assert found.users[0].tally.mean_seconds == pytest.approx((1.0 + 2.0 + 0.5) / 3)


def test_days_follow_the_server_time_zone_across_a_daylight_saving_change() -> None:
    owner = make.user("ada")
    chat = make.conversation(owner)
    paris = ZoneInfo("Europe/Paris")
    # 29 March 2026: clocks go forward in Paris (UTC+1 to UTC+2).
    period = Period(date(2026, 3, 28), date(2026, 3, 30), paris)
    assert period.offset is None
    run(chat, at(date(2026, 3, 28), 23, 30))  # 00:30 on the 29th in Paris
    run(chat, at(date(2026, 3, 29), 22, 30))  # 00:30 on the 30th in Paris
    run(chat, at(date(2026, 3, 27), 23, 30))  # 00:30 on the 28th in Paris
    found = usage.usage(period, prices={})
    assert [found.days[day].runs for day in period.days] == [1, 1, 1]

    winter = Period(date(2026, 1, 10), date(2026, 1, 12), paris)
    assert winter.offset == 3600
    run(chat, at(date(2026, 1, 10), 23, 30))  # 00:30 on the 11th in Paris
    assert [usage.usage(winter, prices={}).days[d].runs for d in winter.days] == [0, 1, 0]


def test_the_figures_cost_the_same_queries_for_a_few_runs_or_thousands() -> None:
    crafted()
    with CaptureQueriesContext(connection) as few:
        usage.usage(PERIOD, prices=PRICES)
    busy(3_000, first=FIRST, days=3)
    with CaptureQueriesContext(connection) as many:
        found = usage.usage(PERIOD, prices=PRICES)
    assert len(many) == len(few) == 6
    assert found.total.runs == 3_005
    assert len(found.models) == 3


def test_a_period_is_whole_days_and_the_recent_one_ends_today() -> None:
    recent = Period.recent()
    assert len(recent.days) == 30
    assert recent.last - recent.first == timedelta(days=29)
    assert PERIOD.start == at(FIRST, 0)
    assert PERIOD.end == at(LAST + timedelta(days=1), 0)
    assert PERIOD.offset == 0


def test_past_the_sample_size_percentiles_read_every_kth_run_and_say_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    owner = make.user("ada")
    chat = make.conversation(owner)
    made = [
        run(chat, at(DAY2, 1, seconds // 60, seconds % 60), duration=float(seconds))
        for seconds in range(100, 0, -1)
    ]
    monkeypatch.setattr(sums, "SAMPLE", 10)
    found = usage.usage(PERIOD, prices={})
    assert found.run_sample == 10
    read = sorted(each.duration or 0 for each in made if each.pk % 10 == 0)
    assert len(read) == 10
    assert found.day_latency[DAY2] == {50: read[4], 95: read[9]}  # ranks 5 and 10 of 10
    assert found.total.runs == 100  # the counts are never sampled
    assert usage.usage(PERIOD, prices={}).run_sample == 10
    monkeypatch.setattr(sums, "SAMPLE", 100)
    assert usage.usage(PERIOD, prices={}).run_sample == 1
