"""The tools a conversation may choose, as the settings show them: the built-in ones, then each
MCP server as a group (the whole server, then each tool), with what is not offered now marked
and why. A chosen tool that is not offered stays a choice, so saving the panel keeps it and it
works again when it comes back: settings change only when their user changes them. A tool that
runs only as an MCP task cannot be chosen (it is never offered), and choices that offer more
tools than a request may carry are warned of."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from chat import agent
from chat.agent.mcp import SEPARATOR
from chat.agent.offer import too_many_tools
from chat.models import McpServer, McpTool
from chat.models.mcp import TASK_ONLY
from chat.runs.mcp import WHOLE_SERVER

NOT_HERE = "not available here"
SERVER_DOWN = "not available: server down"
SERVER_OFF = "not available: server turned off"
NOT_LISTED = "no longer listed"
TASK_ONLY_TEXT = "runs only as an MCP task"
STATUS_CHARS = 200


@dataclass(frozen=True)
class ToolChoice:
    """One checkbox: the name stored, the name shown, and why it is not offered (if it is not)."""

    name: str
    title: str
    description: str = ""
    unavailable: str = ""
    whole: bool = False
    """It chooses a whole server."""
    selectable: bool = True
    """False for a tool never offered (task-only) and not chosen: its box cannot be ticked."""

    @property
    def label(self) -> str:
        return f"{self.title} ({self.unavailable})" if self.unavailable else self.title


@dataclass(frozen=True)
class ToolGroup:
    """The built-in tools, or one MCP server's: a fieldset of the settings."""

    legend: str
    choices: tuple[ToolChoice, ...]
    state: str = ""
    """The server's: up, down, unknown or off (empty for the built-in tools)."""
    status: str = ""
    source: str = ""
    """The server's name (empty for the built-in tools), as a run counts its tools."""


def whole_server(server: str) -> str:
    """The name that chooses every tool of `server`, now and later: `docs__*`."""
    return f"{server}{SEPARATOR}{WHOLE_SERVER}"


def tool_choices(
    chosen: Collection[str], registry: agent.ToolRegistry = agent.default_registry
) -> list[ToolGroup]:
    """Every group, in the order the settings show them; a server turned off by staff only when
    the conversation chose something of it."""
    servers = list(McpServer.objects.prefetch_related("tools"))
    built_in = registry.built_in_names()
    known = {*built_in, *(whole_server(server.name) for server in servers)}
    known |= {row.exposed_name for server in servers for row in server.tools.all()}
    groups = [
        ToolGroup(
            "Built-in tools",
            (
                *(_built_in(name, registry) for name in built_in),
                *(
                    ToolChoice(name, agent.humanize(name), unavailable=NOT_HERE)
                    for name in chosen
                    if name not in known
                ),
            ),
        )
    ]
    for server in servers:
        group = _server_group(server, list(server.tools.all()), chosen)
        if server.enabled or any(choice.name in chosen for choice in group.choices):
            groups.append(group)
    return groups


def _built_in(name: str, registry: agent.ToolRegistry) -> ToolChoice:
    tool = registry.get(name)
    return ToolChoice(name, agent.humanize(name), tool.definition.description if tool else "")


def _server_group(server: McpServer, rows: Sequence[McpTool], chosen: Collection[str]) -> ToolGroup:
    if not server.enabled:
        state, status, why = "off", "Turned off by an administrator.", SERVER_OFF
    elif server.status == McpServer.Status.DOWN:
        error = server.error[:STATUS_CHARS] + ("…" if len(server.error) > STATUS_CHARS else "")
        state, status, why = "down", f"Down: {error}" if error else "Down.", SERVER_DOWN
    elif server.status == McpServer.Status.UP:
        state, status, why = "up", "Up.", ""
    else:
        state, status, why = "unknown", "Not checked yet: connected at the next run.", ""
    everything = ToolChoice(
        whole_server(server.name),
        f"All tools of {server.name}",
        "Every tool this server lists, now and later.",
        why,
        whole=True,
    )
    tools = (_tool_choice(row, why, chosen) for row in rows)
    legend = f"{server.name} · MCP server"
    return ToolGroup(legend, (everything, *tools), state, status, server.name)


def _tool_choice(row: McpTool, why: str, chosen: Collection[str]) -> ToolChoice:
    task_only = row.task_support == TASK_ONLY
    return ToolChoice(
        row.exposed_name,
        agent.humanize(row.exposed_name),
        row.description,
        TASK_ONLY_TEXT if task_only else why or ("" if row.available else NOT_LISTED),
        # One chosen before it became task-only can still be unticked.
        selectable=not task_only or row.exposed_name in chosen,
    )


def flat(groups: Sequence[ToolGroup]) -> list[tuple[str, str]]:
    """The groups as a form field's choices: (name, label)."""
    return [
        (choice.name, choice.label)
        for group in groups
        for choice in group.choices
        if choice.selectable
    ]


def offered_sources(groups: Sequence[ToolGroup], chosen: Collection[str]) -> list[str]:
    """The source of each tool a run would offer of `chosen`, as the groups show them now (a
    server's status may change by the run)."""
    sources = []
    for group in groups:
        whole = any(c.whole and c.name in chosen and not c.unavailable for c in group.choices)
        sources += [
            group.source
            for choice in group.choices
            if not (choice.whole or choice.unavailable) and (whole or choice.name in chosen)
        ]
    return sources


def limit_warning(groups: Sequence[ToolGroup], chosen: Collection[str]) -> str:
    """One line when `chosen` offers more tools than a request may carry; else empty."""
    sources = offered_sources(groups, chosen)
    advice = "A run fails with them: turn some off."
    return too_many_tools(sources, lead="These choices offer", advice=advice) or ""
