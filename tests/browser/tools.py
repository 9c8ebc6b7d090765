"""A deliberately slow tool, registered in the browser tests' server by AGENTLAB_TOOL_MODULES."""

from __future__ import annotations

import asyncio
from typing import Any

from chat.agent.tools import default_registry

SLOW_SECONDS = 1.5


@default_registry.tool(
    name="slow_lookup",
    description="Look something up, slowly.",
    parameters={"type": "object", "properties": {}},
)
async def slow_lookup(arguments: dict[str, Any]) -> dict[str, str]:
    await asyncio.sleep(SLOW_SECONDS)
    return {"found": "a slow answer"}
