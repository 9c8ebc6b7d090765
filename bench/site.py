"""The app under test: a throwaway site whose every process talks to the bench provider.

Nothing here touches the developer's database or `var/`: SQLite lives in a temporary directory,
the scale-out database is created and dropped (chat.testing.site does both).
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager

from bench.provider import MODEL
from bench.restart import GRACE_SECONDS
from chat.testing.site import Site, postgres_site, sqlite_site

POSTGRES = os.environ.get("AGENTLAB_BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432")
REDIS = os.environ.get("AGENTLAB_BENCH_REDIS", "redis://127.0.0.1:6379/6")


def provider_env(provider_url: str) -> dict[str, str]:
    """Settings that point the site at the bench provider, and keep its logs to warnings."""
    return {
        "OPENAI_BASE_URL": provider_url,
        "OPENAI_API_KEY": "bench-key",
        "AGENTLAB_MODEL": MODEL,
        "LOG_LEVEL": "WARNING",
        # A title request would be one more streamed reply of the conversation's tag.
        "AGENTLAB_TITLES": "off",
        # The rolling restart stops the processes mid-reply: they let their runs go, and exit.
        "AGENTLAB_SHUTDOWN_SECONDS": str(GRACE_SECONDS),
    }


def open_site(provider_url: str, *, scaleout: bool) -> AbstractContextManager[Site]:
    """SQLite for one daphne; scaled out, a fresh PostgreSQL database and a flushed Redis."""
    env = provider_env(provider_url)
    return postgres_site(POSTGRES, REDIS, env) if scaleout else sqlite_site(env)
