"""Each tool of an agent version with its policy (run without asking, ask first, never run), as
the agent page lists them and a difference names their changes. A version stores only the
choices that differ from a tool's default; the default is the tool's as this server knows it."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from chat.agent.approvals import POLICY_LABELS, Policy
from chat.agent.contracts import AgentParameters
from chat.agent.mcp import SEPARATOR
from chat.agent.tools import choice_label
from chat.models import McpTool
from chat.models.mcp import WHOLE_SERVER
from chat.runs.approvals import default_policies

WHOLE = SEPARATOR + WHOLE_SERVER


def said(policy: str) -> str:
    """A policy inside a sentence: "ask first"."""
    label = POLICY_LABELS[policy]
    return label[:1].lower() + label[1:]


@dataclass(frozen=True)
class ToolPolicy:
    """A tool a version chose and its policy; a whole server (`docs__*`) with each of the tools
    it lists here and theirs."""

    name: str
    policy: Policy | None
    is_default: bool = True
    tools: tuple[ToolPolicy, ...] = ()

    @property
    def title(self) -> str:
        return choice_label(self.name)

    @property
    def label(self) -> str:
        return POLICY_LABELS[self.policy] if self.policy else ""


@dataclass(frozen=True)
class Known:
    """What this server knows of the tools a page shows: each one's default policy, and the
    tools each whole server lists."""

    defaults: Mapping[str, Policy]
    servers: Mapping[str, tuple[str, ...]]


def known(parameters: Iterable[AgentParameters]) -> Known:
    """The defaults and server listings for all of `parameters` at once (two queries at most,
    however many versions)."""
    names: set[str] = set()
    servers: set[str] = set()
    for each in parameters:
        for name in each.enabled_tools:
            if name.endswith(WHOLE):
                servers.add(name.removesuffix(WHOLE))
            else:
                names.add(name)
        names.update(each.tool_policies)
    listed: dict[str, list[str]] = {server: [] for server in servers}
    if servers:
        rows = McpTool.objects.filter(server__name__in=servers).order_by("exposed_name")
        for server, exposed in rows.values_list("server__name", "exposed_name"):
            listed[server].append(exposed)
            names.add(exposed)
    found = {server: tuple(tools) for server, tools in listed.items()}
    return Known(default_policies(names), found)


def tool_policies(parameters: AgentParameters, known: Known) -> tuple[ToolPolicy, ...]:
    """The chosen tools in their order, each with its policy."""
    return tuple(_shown(name, parameters, known) for name in parameters.enabled_tools)


def _shown(name: str, parameters: AgentParameters, known: Known) -> ToolPolicy:
    if not name.endswith(WHOLE):
        return _one(name, parameters, known)
    listed = known.servers.get(name.removesuffix(WHOLE), ())
    return ToolPolicy(name, None, tools=tuple(_one(tool, parameters, known) for tool in listed))


def _one(name: str, parameters: AgentParameters, known: Known) -> ToolPolicy:
    default = known.defaults.get(name, "ask")
    policy = parameters.tool_policies.get(name, default)
    return ToolPolicy(name, policy, policy == default)


def policy_changes(
    was: AgentParameters, now: AgentParameters, defaults: Mapping[str, Policy] | None = None
) -> list[tuple[str, str, str]]:
    """(tool, before, after) for each tool whose policy differs, kept or chosen in either; the
    defaults are asked of this server only where one side has no choice of its own."""
    kept = [name for name in now.enabled_tools if name in was.enabled_tools]
    names = [*kept, *sorted({*was.tool_policies, *now.tool_policies} - set(kept))]
    names = [name for name in names if not name.endswith(WHOLE)]
    wanted = _unchosen_on_one_side(names, was.tool_policies, now.tool_policies)
    if defaults is None:
        defaults = default_policies(wanted) if wanted else {}
    changes = []
    for name in names:
        default = defaults.get(name, "ask")
        before = was.tool_policies.get(name, default)
        after = now.tool_policies.get(name, default)
        if before != after:
            changes.append((choice_label(name), said(before), said(after)))
    return changes


def _unchosen_on_one_side(
    names: Iterable[str], was: Collection[str], now: Collection[str]
) -> list[str]:
    return [name for name in names if (name in was) != (name in now)]
