"""What tokens cost: AGENTLAB_MODEL_PRICES, read once as the settings load, and the cost of a
count of tokens at a model's price.

Pure (no Django import): the settings module reads the variable with `parse` and refuses a bad
value before anything starts, in one line naming the pair at fault.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

MILLION = Decimal(1_000_000)
MOST = Decimal(1_000_000)
"""The highest price per million tokens accepted: above it, a typo is likelier than a price."""


@dataclass(frozen=True)
class Price:
    """Per million tokens: prompt (input) and completion (output) tokens."""

    prompt: Decimal
    completion: Decimal

    def cost(self, prompt_tokens: int, completion_tokens: int) -> Decimal:
        return (prompt_tokens * self.prompt + completion_tokens * self.completion) / MILLION


EXAMPLE = "gpt-4.1-mini=0.40/1.60,gpt-4.1=2/8"


def parse(text: str) -> dict[str, Price]:
    """Prices by model name from `model=input/output` pairs separated by commas, or from a JSON
    object `{"model": [input, output]}`; raises ValueError saying what is wrong."""
    text = text.strip()
    if not text:
        return {}
    pairs = _json_pairs(text) if text[0] in "{[" else _text_pairs(text)
    prices: dict[str, Price] = {}
    for model, given in pairs:
        if not model:
            raise ValueError(
                f"a price without a model name; write model=input/output, e.g. {EXAMPLE}"
            )
        if model in prices:
            raise ValueError(f"{model!r} is priced twice")
        prices[model] = Price(*(_amount(model, value) for value in given))
    return prices


def _text_pairs(text: str) -> list[tuple[str, list[str]]]:
    pairs = []
    for item in text.split(","):
        model, equals, amounts = item.strip().rpartition("=")
        given = amounts.split("/")
        if not equals or len(given) != 2:
            raise ValueError(
                f"{item.strip()!r} is not model=input/output (prices per million tokens, "
                f"e.g. {EXAMPLE})"
            )
        pairs.append((model.strip(), [value.strip() for value in given]))
    return pairs


def _json_pairs(text: str) -> list[tuple[str, list[str]]]:
    try:
        found = json.loads(text, parse_float=str, parse_int=str, parse_constant=str)
    except ValueError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    if not isinstance(found, dict):
        raise ValueError('JSON must be an object, e.g. {"gpt-4.1-mini": [0.40, 1.60]}')
    pairs = []
    for model, given in found.items():
        if not isinstance(given, list) or len(given) != 2:
            raise ValueError(f"{model!r} needs [input, output] prices per million tokens")
        pairs.append((model.strip(), [value if isinstance(value, str) else "" for value in given]))
    return pairs


def _amount(model: str, value: str) -> Decimal:
    try:
        amount = Decimal(value)
    except InvalidOperation:
        amount = Decimal("NaN")
    if not amount.is_finite() or not 0 <= amount <= MOST:
        raise ValueError(
            f"{model!r}: {value!r} is not a price per million tokens (a number from 0 to {MOST:,})"
        )
    return amount
