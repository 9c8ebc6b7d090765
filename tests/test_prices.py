"""Tests of chat.prices: AGENTLAB_MODEL_PRICES as pairs or JSON, each bad value refused in one
line naming what is wrong, and a site that will not start on one."""

from __future__ import annotations

from decimal import Decimal

import pytest

from chat.prices import Price, parse
from tests.test_deploy import manage


def test_pairs_and_json_give_the_same_prices() -> None:
    expected = {
        "gpt-4.1-mini": Price(Decimal("0.40"), Decimal("1.60")),
        "openai/gpt-4o": Price(Decimal("2.5"), Decimal("10")),
    }
    assert parse(" gpt-4.1-mini=0.40/1.60 , openai/gpt-4o = 2.5/10 ") == expected
    assert parse('{"gpt-4.1-mini": [0.40, 1.60], "openai/gpt-4o": [2.5, 10]}') == expected
    assert parse("") == {} == parse("   ")


def test_a_price_is_per_million_tokens_in_and_out() -> None:
    price = Price(Decimal("0.40"), Decimal("1.60"))
    assert price.cost(1_000_000, 0) == Decimal("0.40")
    assert price.cost(250_000, 500_000) == Decimal("0.9")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("gpt-4.1", "'gpt-4.1' is not model=input/output"),
        ("gpt-4.1=2", "'gpt-4.1=2' is not model=input/output"),
        ("gpt-4.1=2/8/9", "is not model=input/output"),
        ("=2/8", "a price without a model name"),
        ("gpt=two/8", "'gpt': 'two' is not a price per million tokens"),
        ("gpt=-1/8", "'gpt': '-1' is not a price"),
        ("gpt=NaN/8", "'gpt': 'NaN' is not a price"),
        ("gpt=1e9/8", "'gpt': '1e9' is not a price"),
        ("gpt=1/2,gpt=3/4", "'gpt' is priced twice"),
        ("{nope", "not valid JSON"),
        ('["gpt", 1, 2]', "JSON must be an object"),
        ('{"gpt": 1}', "'gpt' needs [input, output] prices"),
        ('{"gpt": [1, true]}', "'gpt': '' is not a price"),
        ('{"gpt": [NaN, 1]}', "'gpt': 'NaN' is not a price"),
    ],
)
def test_bad_prices_are_refused_saying_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse(text)
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_site_with_a_bad_price_does_not_start_and_says_why_in_one_line() -> None:
    result = manage("check", AGENTLAB_MODEL_PRICES="gpt-4.1=2")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        "django.core.exceptions.ImproperlyConfigured: AGENTLAB_MODEL_PRICES: 'gpt-4.1=2' is not "
        "model=input/output (prices per million tokens, e.g. gpt-4.1-mini=0.40/1.60,gpt-4.1=2/8)"
    )
    assert manage("check", AGENTLAB_MODEL_PRICES="gpt-4.1=2/8").returncode == 0
