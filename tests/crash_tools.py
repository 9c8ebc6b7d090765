"""A tool that kills the process executing it, registered in a test site's servers by
AGENTLAB_TOOL_MODULES: a run that calls it dies with its process every time it is resumed."""

from __future__ import annotations

import os
import signal
from typing import Any

from chat.agent.tools import default_registry


@default_registry.tool(
    name="crash_process",
    description="Kill the server process executing this call (said safe to repeat, to repeat).",
    parameters={"type": "object", "properties": {}},
    repeatable=True,
)
def crash_process(arguments: dict[str, Any]) -> str:
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"
