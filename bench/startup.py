"""How long a command that needs no server takes to start.

`cases list` answers at once from the database, and `check` reads nothing but the code: their
time is the start-up every command pays (Python, Django's setup, the models, the admin, the
command's own imports). Each runs in a process of its own on the bench site's database, a few
times, before any daphne is started: the wall time is what a developer waits, the CPU time of
the process is less sensitive to a machine that is busy with something else.
"""

from __future__ import annotations

import resource
import time
from typing import Any

from bench.stats import summary
from chat.testing.site import Site

COMMANDS = (("cases", "list"), ("check",))
TARGET_MS = 1500.0
"""A command that needs no server starts within this (wall p50)."""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(site: Site, samples: int) -> dict[str, Any]:
    """Wall and CPU ms of every command, run `samples` times each, one after the other."""
    commands = []
    for command in COMMANDS:
        walls, cpus = [], []
        for _ in range(samples):
            cpu, started = _children_cpu(), time.perf_counter()
            site.manage(*command)
            walls.append((time.perf_counter() - started) * 1000)
            cpus.append((_children_cpu() - cpu) * 1000)
        commands.append(
            {
                "command": "manage.py " + " ".join(command),
                "wall_ms": {**summary(walls), "min": min(walls)},
                "cpu_ms": {**summary(cpus), "min": min(cpus)},
            }
        )
    return {"samples": samples, "target_ms": TARGET_MS, "commands": commands}
