"""Tools the model may call, and EventAgent, which runs them."""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema
from pydantic import BaseModel, ConfigDict, Field

from . import builtin_tools
from .approvals import Policy, default_policy
from .events import ToolCallProgress, ToolResult
from .messages import ToolCall
from .offer import not_available
from .progress import reporting

ToolHandler = Callable[[dict[str, Any]], Any | Awaitable[Any]]
DEFAULT_TOOL_TIMEOUT = 30.0


def humanize(name: str) -> str:
    """Display name of a tool: `search_cards` -> "Search cards"; an MCP tool reads as its own
    name, without its server's: `docs__search_docs` -> "Search docs"."""
    name = name.rsplit("__", 1)[-1] or name
    words = name.replace("-", "_").replace(".", "_").split("_")
    text = " ".join(word for word in words if word)
    return text[:1].upper() + text[1:] if text else "Unnamed tool"


def choice_label(name: str) -> str:
    """Display name of a chosen tool: as `humanize`; a whole MCP server (`docs__*`) reads
    "Every tool of docs"."""
    if name.endswith("__*"):
        return f"Every tool of {name[:-3]}"
    return humanize(name)


class ToolDefinition(BaseModel):
    """What is offered to the model: a name, a description and a JSON Schema for arguments."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True, slots=True)
class Tool:
    definition: ToolDefinition
    handler: ToolHandler
    timeout: float = DEFAULT_TOOL_TIMEOUT
    source: str = ""
    """Where the tool lives when not built in (an MCP server's name)."""
    repeatable: bool = False
    """Safe to run again when a call's outcome is unknown (the process died during it): it only
    reads, or running it twice does what running it once does."""
    read_only: bool = False
    """It only reads: it runs without asking unless a policy says otherwise (and it is
    repeatable)."""


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A handler's result with the raw form its source gave (kept in the logs)."""

    content: str
    raw: Any = None


@dataclass(frozen=True, slots=True)
class Withheld:
    """A chosen tool a run cannot offer now (its MCP server is down, turned off or no longer
    lists it), and why: a call to it is answered with `reason` as unavailable, never as an
    unknown tool."""

    reason: str
    source: str = ""


class ToolRegistry:
    """Named tools; other code adds its own with `register`. A run executes with a registry of
    its own (see `copy`): nothing one run adds or withholds changes another run's tools."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._withheld: dict[str, Withheld] = {}

    def copy(self) -> ToolRegistry:
        """A registry of its own with these tools: the Tool objects are shared and their
        schemas not checked again, so a run's own registry costs a dict copy."""
        copied = ToolRegistry()
        copied._tools = dict(self._tools)
        copied._withheld = dict(self._withheld)
        return copied

    def register(
        self,
        definition: ToolDefinition,
        handler: ToolHandler,
        *,
        timeout: float = DEFAULT_TOOL_TIMEOUT,
        source: str = "",
        repeatable: bool = False,
        read_only: bool = False,
    ) -> Tool:
        jsonschema.Draft202012Validator.check_schema(definition.parameters)
        tool = Tool(definition, handler, timeout, source, repeatable or read_only, read_only)
        self._tools[definition.name] = tool
        self._withheld.pop(definition.name, None)
        return tool

    def tool(
        self,
        *,
        name: str,
        description: str,
        parameters: dict[str, Any],
        timeout: float = DEFAULT_TOOL_TIMEOUT,
        repeatable: bool = False,
        read_only: bool = False,
    ) -> Callable[[ToolHandler], ToolHandler]:
        """Decorator form of `register`."""

        def decorate(handler: ToolHandler) -> ToolHandler:
            self.register(
                ToolDefinition(name=name, description=description, parameters=parameters),
                handler,
                timeout=timeout,
                repeatable=repeatable,
                read_only=read_only,
            )
            return handler

        return decorate

    def unregister(self, name: str) -> None:
        self._tools.pop(name, None)

    def withhold(self, name: str, reason: str, *, source: str = "") -> None:
        """Keep `name` known but not offered: a call to it fails as unavailable, saying why."""
        self._tools.pop(name, None)
        self._withheld[name] = Withheld(reason, source)

    def withheld(self, name: str) -> Withheld | None:
        return self._withheld.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def built_in_names(self) -> list[str]:
        """The tools of this process's own code: not those another source (an MCP server)
        registered for a run, which differ from process to process."""
        return sorted(name for name, tool in self._tools.items() if not tool.source)

    def offered(self, names: Iterable[str]) -> list[str]:
        """Of `names`, those this registry offers to the model, in their order."""
        return [name for name in names if name in self._tools]

    def repeatable(self, name: str) -> bool:
        """Whether a call of `name` whose outcome is unknown may be run again."""
        tool = self._tools.get(name)
        return tool is not None and tool.repeatable

    def policy(self, name: str, chosen: Mapping[str, Policy]) -> Policy:
        """Whether a call of `name` runs, waits for a person or is refused: as `chosen`, else
        run for a tool that only reads and ask for any other. A tool not here fails when
        called, so nothing waits for it (unless it is never to run)."""
        tool = self._tools.get(name)
        if tool is None:
            return "never" if chosen.get(name) == "never" else "run"
        return chosen.get(name) or default_policy(tool.read_only)

    def definitions(self, names: Iterable[str]) -> list[ToolDefinition]:
        return [self._tools[name].definition for name in self.offered(names)]

    def source_of(self, name: str) -> str:
        """Where the tool `name` lives: its MCP server, "" when built in or not here."""
        tool = self._tools.get(name)
        withheld = self._withheld.get(name)
        return tool.source if tool is not None else withheld.source if withheld else ""

    def sources(self, names: Iterable[str]) -> list[str]:
        """Of `names`, the source of each tool offered ("" for a built-in one)."""
        return [self._tools[name].source for name in self.offered(names)]


default_registry = ToolRegistry()
builtin_tools.register(default_registry)


class EventAgent:
    """Executes tool calls. Every failure becomes a JSON error reply the model can read."""

    def __init__(
        self,
        registry: ToolRegistry,
        enabled: Iterable[str],
        policies: Mapping[str, Policy] | None = None,
    ) -> None:
        self.registry = registry
        self.enabled = frozenset(enabled)
        self.offered = sorted(registry.offered(self.enabled))
        self.policies = None if policies is None else dict(policies)
        """None: no call waits or is refused by policy (an evaluation's replay)."""

    def policy(self, call: ToolCall) -> Policy:
        """Run, ask or never for this call: a call that fails before its tool runs (a tool
        not enabled or not here) needs no one's approval."""
        if call.name not in self.enabled or self.policies is None:
            return "run"
        return self.registry.policy(call.name, self.policies)

    async def execute(
        self, call: ToolCall, *, progress: Callable[[ToolCallProgress], None] | None = None
    ) -> ToolResult:
        """Run one call; `progress` hears what its handler reports (`report_progress`)."""
        started = time.monotonic()
        source = self.registry.source_of(call.name)
        policy = self.policy(call) if self.policies is not None else ""
        try:
            with reporting(call.id, progress):
                output = await self._execute(call)
        except ToolError as exc:
            return ToolResult(
                tool_call=call,
                content=json.dumps({"error": str(exc)}, ensure_ascii=False),
                status="failed",
                error=str(exc),
                duration=time.monotonic() - started,
                source=source,
                raw=exc.raw,
                failure=exc.kind,
                policy=policy,
            )
        return ToolResult(
            tool_call=call,
            content=output.content,
            status="completed",
            duration=time.monotonic() - started,
            source=source,
            raw=output.raw,
            policy=policy,
        )

    async def handle(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """Run a turn's calls concurrently; the results come back in call order."""
        return list(await asyncio.gather(*(self.execute(call) for call in calls)))

    async def stream(
        self, calls: Sequence[ToolCall]
    ) -> AsyncGenerator[ToolResult | ToolCallProgress]:
        """Run a turn's calls concurrently, yielding each result as it finishes and, meanwhile,
        the progress the calls report (none of a call after its result)."""
        heard: asyncio.Queue[ToolResult | ToolCallProgress | Exception] = asyncio.Queue()

        async def execute(call: ToolCall) -> None:
            try:
                heard.put_nowait(await self.execute(call, progress=heard.put_nowait))
            except Exception as exc:
                heard.put_nowait(exc)

        tasks = [asyncio.ensure_future(execute(call)) for call in calls]
        done, finished = 0, set[str]()
        try:
            while done < len(tasks):
                item = await heard.get()
                if isinstance(item, Exception):
                    raise item
                if isinstance(item, ToolResult):
                    done += 1
                    finished.add(item.tool_call.id)
                elif item.tool_call_id in finished:
                    continue
                yield item
        finally:
            for task in tasks:
                task.cancel()

    async def _execute(self, call: ToolCall) -> ToolOutput:
        tool = self.registry.get(call.name)
        if tool is None or call.name not in self.enabled:
            withheld = self.registry.withheld(call.name)
            if withheld is not None and call.name in self.enabled:
                raise ToolError(withheld.reason, kind="unavailable")
            raise ToolError(
                not_available(call.name, self.offered),
                kind="unknown_tool" if tool is None else "not_enabled",
            )
        arguments = parse_arguments(call.arguments, tool.definition.parameters)
        try:
            async with asyncio.timeout(tool.timeout) as deadline:
                if inspect.iscoroutinefunction(tool.handler):
                    value = await tool.handler(arguments)
                else:
                    value = await asyncio.to_thread(tool.handler, arguments)
                    if inspect.isawaitable(value):
                        value = await value
        except TimeoutError:
            if not deadline.expired():
                raise ToolError(f"TimeoutError raised by {call.name!r}") from None
            raise ToolError(
                f"tool {call.name!r} timed out after {tool.timeout:g}s", kind="timeout"
            ) from None
        except ToolError:
            raise
        except Exception as exc:  # a tool's failure is a result the model sees, not a crash
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc
        if isinstance(value, ToolOutput):
            return value
        if isinstance(value, str):
            return ToolOutput(value)
        try:
            return ToolOutput(json.dumps(value, ensure_ascii=False, default=str))
        except (TypeError, ValueError) as exc:
            raise ToolError(f"the result is not JSON-serialisable: {exc}") from None


def parse_arguments(text: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments (its raw JSON text) checked against its tool's schema; ToolError
    (invalid arguments, saying where and why) when they are not JSON, not an object or not
    the schema's."""
    try:
        arguments = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ToolError(f"invalid arguments: not valid JSON: {exc}", kind=INVALID) from None
    if not isinstance(arguments, dict):
        raise ToolError("invalid arguments: not a JSON object", kind=INVALID)
    try:
        jsonschema.validate(arguments, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(part) for part in exc.absolute_path)
        raise ToolError(
            f"invalid arguments{f' at {where}' if where else ''}: {exc.message}", kind=INVALID
        ) from None
    return arguments


INVALID = "invalid_arguments"
FAILURE_KINDS = (
    "tool_error",
    INVALID,
    "unknown_tool",
    "not_enabled",
    "timeout",
    "unavailable",
    "interrupted",
    "denied",
    "not_allowed",
)
"""Why a call failed: the tool raised or reported an error; the arguments were not JSON or not
the schema's; the name was never a tool here; a tool this conversation did not enable; it took
too long; its source (an MCP server) could not be reached, or does not offer it now; the process
died during it and it is not safe to repeat; a person denied it (or did not decide in time);
its policy is never."""


class ToolError(Exception):
    """A tool call could not be carried out; its text becomes the error reply. `kind` is one of
    FAILURE_KINDS; `raw` keeps what the tool's source answered, when it answered."""

    def __init__(self, message: str, *, kind: str = "tool_error", raw: Any = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.raw = raw
