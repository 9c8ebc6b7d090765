"""Scale-out: several daphne processes sharing one PostgreSQL database and one Redis."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest
import redis

from chat.testing.site import Site, postgres_site

POSTGRES = os.environ.get("AGENTLAB_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432")
# Each parallel test worker (pytest-xdist's gw0, gw1, ...) has a Redis database of its own:
# a site flushes its database, and group names repeat across sites.
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
REDIS = os.environ.get("AGENTLAB_TEST_REDIS", f"redis://127.0.0.1:6379/{7 + WORKER % 8}")
SERVER_ENV = {"AGENTLAB_SCRIPTED_DELAY": "0.01", "AGENTLAB_TOOL_MODULES": "tests.browser.tools"}


def _services_down() -> str | None:
    try:
        psycopg.connect(f"{POSTGRES}/postgres", connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"PostgreSQL is not reachable at {POSTGRES}: {exc}"
    try:
        redis.Redis.from_url(REDIS, socket_timeout=3).ping()
    except redis.RedisError as exc:
        return f"Redis is not reachable at {REDIS}: {exc}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if "scaleout" not in item.keywords:
            continue
        # A module's tests share its site and processes: under parallel workers (make test),
        # they run on one worker, which makes them once.
        item.add_marker(pytest.mark.xdist_group(item.nodeid.partition("::")[0]))
        reason = reason or _services_down() or ""
        if reason and os.environ.get("CI"):
            item.add_marker(pytest.mark.xfail(reason=reason, run=False, strict=True))
        elif reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    """A fresh PostgreSQL database and Redis shared by the daphne processes of one module."""
    with postgres_site(POSTGRES, REDIS, env=SERVER_ENV) as made:
        yield made
