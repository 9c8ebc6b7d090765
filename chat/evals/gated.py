"""What approvals would have done to a replayed decision: an evaluation never executes a tool
and never waits, but each result records which of the model's first-turn calls would have
waited for a person (or been refused) under the evaluated configuration's policies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chat import agent
from chat.runs.approvals import default_policies


def gated_calls(
    parameters: Mapping[str, Any], calls: Sequence[agent.ToolCall]
) -> list[dict[str, str]]:
    """Each call, in the model's order, that would have waited (`ask`) or been refused
    (`never`): by the replayed parameters' own tool policies (the agent version's, or the
    case's), else each tool's default as this server knows it. A call of a tool the replay did
    not enable fails before any policy applies, as in a chat."""
    enabled = set(parameters.get("enabled_tools") or ())
    chosen: Mapping[str, str] = parameters.get("tool_policies") or {}
    called = {call.name for call in calls if call.name in enabled}
    defaults = default_policies(called - set(chosen))
    found = []
    for call in calls:
        if call.name not in enabled:
            continue
        policy = chosen.get(call.name) or defaults[call.name]
        if policy != "run":
            found.append({"name": call.name, "policy": policy})
    return found
