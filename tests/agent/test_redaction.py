"""Tests of chat.agent.redaction: the one place that knows what a secret is."""

from __future__ import annotations

import pytest

from chat.agent.redaction import REDACTED, looks_secret, redact, redact_text


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("Authorization", True),
        ("X-Api-Key", True),
        ("api_key", True),
        ("access_token", True),
        ("signature", True),
        ("X-Goog-Auth", True),
        ("Content-Type", False),
        ("model", False),
        ("temperature", False),
    ],
)
def test_looks_secret_by_name(name: str, secret: bool) -> None:
    assert looks_secret(name) is secret


def test_redact_text_replaces_every_secret_longest_first() -> None:
    text = "key sk-abc and sk-abcdef, twice sk-abcdef"
    assert redact_text(text, ["sk-abc", "sk-abcdef", ""]) == (
        f"key {REDACTED} and {REDACTED}, twice {REDACTED}"
    )


def test_redact_walks_json_and_keeps_everything_else() -> None:
    value = {
        "model": "m",
        "max_tokens": 5,
        "api_key": "abc",
        "password": "",
        "headers": {"Authorization": "Bearer xyz", "Accept": "text/event-stream"},
        "messages": [
            {"role": "user", "content": "my key is plain-secret-value"},
            {"role": "user", "content": "bearer-shaped: Bearer abc.def-123"},
            {"role": "user", "content": "openai-shaped: sk-0123456789abcdefXYZ"},
        ],
    }
    assert redact(value, ["plain-secret-value"]) == {
        "model": "m",
        "max_tokens": 5,
        "api_key": REDACTED,
        "password": "",
        "headers": {"Authorization": REDACTED, "Accept": "text/event-stream"},
        "messages": [
            {"role": "user", "content": f"my key is {REDACTED}"},
            {"role": "user", "content": f"bearer-shaped: {REDACTED}"},
            {"role": "user", "content": f"openai-shaped: {REDACTED}"},
        ],
    }


def test_short_known_values_are_not_replaced_inside_json() -> None:
    """A 3-character "key" would blank ordinary words; names and shapes still catch it."""
    assert redact({"content": "the cat sat"}, ["cat"]) == {"content": "the cat sat"}
