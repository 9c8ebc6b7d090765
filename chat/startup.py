"""What a server process does once as it starts: recover runs that a dead process left behind,
wind up its own runs when it is stopped, and take what start-up loaded out of the garbage
collector's way."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
from typing import Any, cast

from django.conf import settings
from django.db import DatabaseError, connections
from django.template.loader import get_template
from django.urls import get_resolver

from chat import runs
from chat.agent.mcp import load_sdk
from chat.evals import resume as evals_resume
from chat.models import Run
from chat.runs import mcp, resume, tasks

logger = logging.getLogger(__name__)


def recover_on_start() -> list[Run]:
    """Mark the replays of evaluations that a process that died left in progress as
    interrupted (their history repaired): the sweeper resumes conversations' runs and
    evaluations, which make those replays again.

    Never raises: a server must start even before `migrate` (the error is logged). Safe when
    several processes start at once: only runs whose process is gone are touched. Called from
    inside an event loop (an ASGI server importing the app), it works in a thread of its own,
    since the ORM refuses synchronous queries there.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _recover()
    recovered: list[Run] = []

    def work() -> None:
        try:
            recovered.extend(_recover())
        finally:
            connections.close_all()

    thread = threading.Thread(target=work, name="recover-runs")
    thread.start()
    thread.join()
    return recovered


def _recover() -> list[Run]:
    try:
        recovered = runs.recover_interrupted_runs(evaluations_only=True)
    except DatabaseError as exc:
        logger.warning("interrupted runs not recovered: the database is not ready (%s)", exc)
        return []
    except Exception:
        logger.exception("interrupted runs not recovered")
        return []
    if recovered:
        logger.warning(
            "recovered %d run(s) left in progress by a process that stopped", len(recovered)
        )
    return recovered


def wind_up_runs_on_shutdown() -> bool:
    """Under daphne: once serving, sweep for runs to resume (`resume.sweep_forever`: those a
    stopped or dead process left, at once, then every AGENTLAB_CLAIM_SECONDS); on SIGTERM and
    SIGINT, first wind up the runs of this process (they pause for another to resume), then
    exit.

    Twisted's reactor owns the process's signals under daphne: it stops on SIGTERM/SIGINT,
    and a "before shutdown" trigger that returns a Deferred holds the exit until it fires.
    Returns whether the hook is installed (not outside a Twisted server: tests, commands).
    """
    if "twisted.internet.reactor" not in sys.modules:
        return False
    from twisted.internet import defer, reactor

    loop = getattr(reactor, "_asyncioEventloop", None)
    if loop is None:
        return False

    async def wind_up() -> int:
        wound_up = await runs.wind_up_all(settings.AGENTLAB_SHUTDOWN_SECONDS)
        await mcp.hub.close()  # and so stop the stdio servers this process started
        return wound_up

    def before_shutdown() -> defer.Deferred[int]:
        return defer.Deferred.fromFuture(asyncio.ensure_future(wind_up(), loop=loop))

    def sweep() -> None:
        sweeper = loop.create_task(resume.sweep_forever(evals_resume.sweep), name="resume runs")
        tasks.background.add(sweeper)  # cancelled, not waited for, when the process stops

    # The reactor is typed as a module; at run time it is the installed asyncio reactor.
    cast(Any, reactor).addSystemEventTrigger("before", "shutdown", before_shutdown)
    cast(Any, reactor).callWhenRunning(sweep)
    return True


GC_THRESHOLD = (10_000, 20, 20)


def freeze_start_up_objects() -> None:
    """Move everything loaded so far into the collector's permanent generation.

    A full collection of a server's heap (Django, templates, URL patterns: ~100,000 objects)
    paused the event loop for 60-100 ms every few seconds, which every stream felt. Frozen
    objects are never traversed again, so a full collection only walks what runs create.
    The hot templates, the URL patterns and the MCP SDK (which commands leave unloaded) are
    loaded first so that they are frozen too.

    The youngest generation is collected every GC_THRESHOLD allocations instead of Python's
    700: a streaming token allocates dozens of short-lived objects, and at 200 streams the
    collector's passes took ~6% of the process (1.3 ms of CPU per run, 0.2 ms with this).
    """
    get_resolver().url_patterns  # noqa: B018 (loads every URLconf)
    for name in ("chat/conversation.html", "chat/sidebar.html", "base.html"):
        get_template(name)
    load_sdk()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)
