"""MCP servers in this process: their connections, their tools in a run's registry, and what the
database knows of them (the tools each lists, whether it is up).

The database is the source of truth for which servers and tools exist; each process keeps its
own connections (a stdio server is started by the process that calls it) and, just before a
run that enabled a server's tools, puts them in that run's own registry, so a run without MCP
tools costs nothing and a server down for one run changes no other run's tools.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async as sync_to_async
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from chat import agent
from chat.agent import mcp, mcp_content
from chat.agent.progress import progress_callback
from chat.agent.tools import ToolError, ToolOutput
from chat.models import McpServer, McpTool
from chat.models.mcp import WHOLE_SERVER, known_tool_names, whole_servers

__all__ = [  # the rules live with the models and the configuration
    "WHOLE_SERVER",
    "config_problems",
    "known_tool_names",
    "parse_command",
    "server_config",
    "whole_servers",
]

from .mcp_config import config_problems, parse_command, server_config
from .mcp_prompts import refresh_prompts

logger = logging.getLogger(__name__)
SEPARATOR = mcp.SEPARATOR
MAX_RAW_CHARS = 8_000_000
"""The most of a result stored as the server sent it; past it, long strings are shortened."""
RAW_TEXT_CHARS = 2_000


def _raw(result: Any) -> dict[str, Any]:
    """A result as the server sent it, whole (its images are shown from it), unless it is
    past MAX_RAW_CHARS: then its long texts and binary data are shortened."""
    raw = mcp_content.as_json(result)
    if len(json.dumps(raw)) <= MAX_RAW_CHARS:
        return raw
    for part in raw.get("content", []):
        for key in ("text", "data", "blob"):
            value = part.get(key)
            if isinstance(value, str) and len(value) > RAW_TEXT_CHARS:
                part[key] = value[:RAW_TEXT_CHARS] + f"… ({len(value):,} characters in all)"
    if len(json.dumps(raw.get("structuredContent"), default=str)) > 4 * RAW_TEXT_CHARS:
        raw["structuredContent"] = "(too big to keep)"
    return raw


@dataclass(frozen=True, slots=True)
class PreparedRun:
    """What a run executes with: its request (whole servers expanded) and its own registry."""

    request: agent.DebugRunRequest
    registry: agent.ToolRegistry


def unavailable(server: str, reason: object) -> str:
    """What the model reads of a call to a tool whose MCP server cannot be reached."""
    return f"MCP server {server} is unavailable: {reason}"


class Hub:
    """This process's MCP connections. It keeps connections only: each run gets a registry of
    its own from `prepare`, so a server down for one run changes no other run's tools."""

    def __init__(self) -> None:
        self.connections: dict[str, tuple[mcp.ServerConfig, mcp.Connection]] = {}
        self._lock = asyncio.Lock()

    async def connection(self, server: McpServer) -> mcp.Connection:
        """The server's connection, started (again, if its configuration changed)."""
        config = server_config(server)
        async with self._lock:
            known = self.connections.get(server.name)
            if known is not None and known[0] != config:
                await known[1].close()
                known = None
            if known is None:
                pk = server.pk

                async def changed(tools: list[mcp.ServerTool]) -> None:
                    await sync_to_async(save_tools)(pk, tools)

                async def prompts_changed(connection: mcp.Connection) -> None:
                    await refresh_prompts(pk, connection)

                known = (config, mcp.Connection(config, changed, prompts_changed))
                self.connections[server.name] = known
        await known[1].start()
        return known[1]

    async def prepare(self, request: agent.DebugRunRequest) -> PreparedRun:
        """Before a run: its own registry, the built-in tools and the MCP tools it chose,
        connected. A chosen MCP tool it cannot offer (its server down, and marked so; turned
        off; no longer listed) is withheld: a call to it is answered as unavailable. Whole
        servers are expanded, and the settings validated against that registry."""
        registry = agent.default_registry.copy()
        names = request.parameters.enabled_tools
        if not any(mcp.SEPARATOR in name for name in names):
            return PreparedRun(request, registry)
        rows = await sync_to_async(lambda: list(McpTool.objects.chosen(names)))()
        for server in {row.server.pk: row.server for row in rows}.values():
            own = [row for row in rows if row.server_id == server.pk]
            try:
                connection = await self.connection(server)
            except mcp.McpUnavailable as exc:
                await sync_to_async(mark)(server.pk, up=False, error=str(exc))
                reason = unavailable(server.name, exc)
                for row in own:
                    registry.withhold(row.exposed_name, reason, source=server.name)
                continue
            if server.status != McpServer.Status.UP:
                await sync_to_async(mark)(server.pk, up=True)
            for row in own:
                self._register(registry, row, server, connection)
        expanded = tuple(dict.fromkeys(_expand(names, rows)))
        for name in expanded:
            if mcp.SEPARATOR in name and name not in registry and registry.withheld(name) is None:
                reason = f"MCP tool {name} is unavailable: no enabled server lists it"
                registry.withhold(name, reason)
        parameters = agent.AgentParameters.model_validate(
            {**dict(request.parameters), "enabled_tools": expanded},
            context={"registry": registry, "unavailable_tools": names},
        )
        return PreparedRun(request.model_copy(update={"parameters": parameters}), registry)

    def _register(
        self,
        registry: agent.ToolRegistry,
        row: McpTool,
        server: McpServer,
        connection: mcp.Connection,
    ) -> None:
        """Put one of a server's tools in a run's registry; it calls the server through this
        hub's connection of the moment (a reconnection included)."""
        definition = row.definition()
        tool_name, server_name = row.name, server.name

        async def call(arguments: dict[str, Any]) -> ToolOutput:
            try:
                current = self.connections.get(server_name)
                live = current[1] if current is not None else connection
                result = await live.call(tool_name, arguments, progress=progress_callback())
            except mcp.McpUnavailable as exc:
                raise ToolError(unavailable(server_name, exc), kind="unavailable") from None
            except mcp.McpCallFailed as exc:  # the server answered: the tool's own failure
                raise ToolError(str(exc)) from None
            limit = settings.AGENTLAB_MAX_TOOL_RESULT_CHARS
            if result.is_error:
                raise ToolError(mcp_content.error_text(result, limit=limit), raw=_raw(result))
            return ToolOutput(mcp_content.result_text(result, limit=limit), raw=_raw(result))

        try:
            registry.register(
                definition,
                call,
                timeout=server.timeout,
                source=server_name,
                repeatable=row.repeatable,
                read_only=row.read_only,
            )
        except Exception as exc:  # an input schema that is not JSON Schema: not offered
            logger.info("MCP tool %s not offered: %s", row.exposed_name, exc)
            reason = f"MCP tool {row.exposed_name} is unavailable: its input schema is invalid"
            registry.withhold(row.exposed_name, reason, source=server_name)

    async def refresh(self, server: McpServer) -> list[mcp.ServerTool]:
        """Ask the server for its tools and prompts now and store them; McpUnavailable if it
        is down."""
        try:
            connection = await self.connection(server)
            tools = await connection.list_tools()
        except mcp.McpUnavailable as exc:
            await sync_to_async(mark)(server.pk, up=False, error=str(exc))
            raise
        await sync_to_async(save_tools)(server.pk, tools)
        await refresh_prompts(server.pk, connection)
        return tools

    async def close(self) -> None:
        """Stop every connection (and so every stdio server this process started)."""
        connections = [connection for _, connection in self.connections.values()]
        self.connections.clear()
        await asyncio.gather(*(connection.close() for connection in connections))
        self._lock = asyncio.Lock()  # a command's next asyncio.run is a new event loop


hub = Hub()


def _expand(names: Sequence[str], rows: Sequence[McpTool]) -> list[str]:
    expanded: list[str] = []
    for name in names:
        if mcp.SEPARATOR in name and name.endswith(mcp.SEPARATOR + WHOLE_SERVER):
            server = name[: -len(mcp.SEPARATOR + WHOLE_SERVER)]
            expanded += [row.exposed_name for row in rows if row.server.name == server]
        else:
            expanded.append(name)
    return expanded


def mark(server_pk: int, *, up: bool, error: str = "") -> None:
    """Record whether a server answered, and why not."""
    McpServer.objects.filter(pk=server_pk).update(
        status=McpServer.Status.UP if up else McpServer.Status.DOWN,
        error="" if up else error[:2000],
        checked_at=timezone.now(),
    )


@transaction.atomic
def save_tools(server_pk: int, tools: Sequence[mcp.ServerTool]) -> list[McpTool]:
    """Store what the server lists: new tools get a stable exposed name, changed ones are
    updated, tools it no longer lists stay (a conversation's choice is kept) but unavailable."""
    server = McpServer.objects.select_for_update().get(pk=server_pk)
    existing = {row.name: row for row in server.tools.all()}
    taken = set(McpTool.objects.exclude(server=server).values_list("exposed_name", flat=True))
    taken |= {row.exposed_name for row in existing.values()}
    kept: list[McpTool] = []
    for tool in tools:
        row = existing.pop(tool.name, None)
        if row is None:
            row = McpTool(server=server, name=tool.name[:200])
            row.exposed_name = mcp.exposed_name(server.name, tool.name, taken)
            taken.add(row.exposed_name)
        row.description = tool.description
        row.input_schema = tool.input_schema
        row.annotations = tool.annotations
        row.task_support = tool.task_support
        row.available = True
        row.save()
        kept.append(row)
    McpTool.objects.filter(pk__in=[row.pk for row in existing.values()]).update(available=False)
    mark(server.pk, up=True)
    return kept


async def refresh_all(
    servers: Sequence[McpServer],
) -> dict[int, list[mcp.ServerTool] | mcp.McpUnavailable]:
    """Ask each server for its tools, all at once, and store them: by server pk, the tools or
    why the server is down (it is marked so).

    For commands and the admin: a hub of their own, closed before returning, so no connection
    (nor stdio server) outlives the event loop the caller runs this in.
    """
    own = Hub()
    try:
        answers = await asyncio.gather(
            *(own.refresh(server) for server in servers), return_exceptions=True
        )
    finally:
        await own.close()
    results: dict[int, list[mcp.ServerTool] | mcp.McpUnavailable] = {}
    for server, answer in zip(servers, answers, strict=True):
        if isinstance(answer, BaseException) and not isinstance(answer, mcp.McpUnavailable):
            raise answer
        results[server.pk] = answer
    return results
