"""Two tools that write down every time they execute, registered in the rolling-restart tests'
servers by AGENTLAB_TOOL_MODULES: whichever process runs a call, the site's log has one line
per execution, so a call executed twice shows."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from django.conf import settings

from chat.agent.tools import default_registry

SECONDS = 0.3
TICKET = {"type": "object", "properties": {"ticket": {"type": "string"}}, "required": ["ticket"]}


def log_path() -> Path:
    """Where every execution is written: the site's var directory, shared by its processes
    (the tests read it there; they do not import this module, which registers tools)."""
    return Path(settings.VAR_DIR) / "tool-executions.jsonl"


async def _execute(name: str, arguments: dict[str, Any]) -> dict[str, str]:
    line = json.dumps({"tool": name, "ticket": arguments.get("ticket"), "pid": os.getpid()})
    log_path().parent.mkdir(parents=True, exist_ok=True)
    with log_path().open("a") as log:  # one short append: whole lines from any process
        log.write(line + "\n")
    await asyncio.sleep(SECONDS)
    return {"ticket": str(arguments.get("ticket")), "done": name}


@default_registry.tool(
    name="book_slot",
    description="Book a slot (a write: not safe to run twice).",
    parameters=TICKET,
)
async def book_slot(arguments: dict[str, Any]) -> dict[str, str]:
    return await _execute("book_slot", arguments)


@default_registry.tool(
    name="read_ledger",
    description="Read the ledger (read-only: safe to run again).",
    parameters=TICKET,
    repeatable=True,
)
async def read_ledger(arguments: dict[str, Any]) -> dict[str, str]:
    return await _execute("read_ledger", arguments)
