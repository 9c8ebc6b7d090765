"""The Usage page's figures are the same on SQLite and PostgreSQL: the crafted history and a busy
one loaded into a SQLite site and a PostgreSQL site, summed by each (days in UTC, and in Paris,
which SQLite's own date() shifts and PostgreSQL converts), percentiles included."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from chat.testing.site import Site, beside_sqlite

pytestmark = pytest.mark.scaleout

BUILD = (
    "from chat.testing.usage_history import FIRST, busy, crafted\n"
    "crafted()\n"
    "busy(1_500, first=FIRST, days=3)\n"
)
READ = """
import json
from datetime import UTC
from decimal import Decimal
from zoneinfo import ZoneInfo
from chat import usage
from chat.testing.usage_history import FIRST, LAST, PRICES

def rounded(value):
    if isinstance(value, float):
        return round(value, 4)
    return str(value) if isinstance(value, Decimal) else value

def tally(t):
    return {k: rounded(v) for k, v in vars(t).items()}

out = {}
for zone in (UTC, ZoneInfo("Europe/Paris")):
    for kind in usage.KINDS:
        found = usage.usage(usage.Period(FIRST, LAST, zone), kind, PRICES)
        out[f"{zone}-{kind}"] = {
            "days": {str(d): tally(t) for d, t in found.days.items()},
            "calls": {str(d): tally(t) for d, t in found.day_calls.items()},
            "latency": {str(d): p for d, p in found.day_latency.items()},
            "call_latency": {str(d): p for d, p in found.day_call_latency.items()},
            "total": [found.latency, found.call_latency, tally(found.total)],
            "groups": [
                [g.name, g.detail, rounded(g.p50), rounded(g.p95), tally(g.tally)]
                for g in found.models + found.users + found.agents + found.tools
            ],
        }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def sites(site: Site) -> Iterator[dict[str, Site]]:
    with beside_sqlite(site, BUILD) as both:
        yield both


def figures(site: Site) -> Any:
    return json.loads(site.manage("shell", "-c", READ).splitlines()[-1])


def test_both_backends_sum_and_rank_alike(sites: dict[str, Site]) -> None:
    lite, postgres = figures(sites["sqlite"]), figures(sites["postgresql"])
    assert lite.keys() == postgres.keys()
    for key in lite:
        assert lite[key] == postgres[key], key
    utc = lite["UTC-all"]
    assert utc["total"][2]["runs"] == 1_505
    assert utc["latency"]["2026-03-02"].keys() == {"50", "95"}
    paris = lite["Europe/Paris-all"]
    assert paris["days"] != utc["days"]  # an hour later, some runs change day
