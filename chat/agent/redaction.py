"""Secrets out of everything shown, logged or stored: the one place that knows what a secret is.

Known key values are replaced wherever they appear; besides those, a name that sounds like a
credential (a header, a JSON key, a query parameter) marks its value as secret, and a value
shaped like a bearer token or an OpenAI-style key is replaced even when nothing named it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

REDACTED = "[REDACTED]"
SECRET_HINTS = ("auth", "key", "token", "secret", "password", "signature")
"""Words that make a header, query parameter or field name hold a secret."""
_SECRET_FIELD = re.compile(
    r"^(proxy-)?authorization$|^x?-?api[-_]?key$|^api[-_]?token$|^access[-_]?token$|secret|password",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=-]+|\bsk-[A-Za-z0-9_-]{16,}")
MIN_SECRET_CHARS = 8
"""Shorter key values are not replaced inside JSON: they would also hit ordinary words."""


def looks_secret(name: str) -> bool:
    """Whether a header or query parameter `name` carries a secret (`api_key`, `X-Auth`...)."""
    lowered = name.lower()
    return any(hint in lowered for hint in SECRET_HINTS)


def longest_first(secrets: Iterable[str]) -> tuple[str, ...]:
    """The distinct secrets in the order they are replaced: a key that holds another goes first."""
    return tuple(sorted({s for s in secrets if s}, key=len, reverse=True))


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of each secret replaced, longest first."""
    return replace_secrets(text, longest_first(secrets))


def replace_secrets(text: str, ordered: tuple[str, ...]) -> str:
    """`redact_text` with the secrets already in `longest_first` order (once per client, not
    once per streamed line)."""
    for secret in ordered:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A JSON value with anything that looks like a credential replaced, for display.

    Fields named like credentials lose their value, strings lose the known `secrets` and
    anything shaped like a bearer token or an `sk-` key.
    """
    known = sorted({s for s in secrets if len(s or "") >= MIN_SECRET_CHARS}, key=len, reverse=True)
    return _redact(value, known)


def _redact(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, dict):
        return {
            name: REDACTED if _SECRET_FIELD.search(str(name)) and item else _redact(item, secrets)
            for name, item in value.items()
        }
    if isinstance(value, list):
        return [_redact(item, secrets) for item in value]
    if isinstance(value, str):
        return _SECRET_VALUE.sub(REDACTED, redact_text(value, secrets))
    return value
