"""A tool call's progress: handlers report it (from the loop, from a thread, or through a
callback another task calls, as an MCP session does) and the run yields it as ToolCallProgress
events between the call's start and its result."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from chat.agent.contracts import AgentParameters, DebugRunRequest
from chat.agent.events import ToolCallFinished, ToolCallProgress, ToolCallStarted, ToolResult
from chat.agent.messages import ToolCall
from chat.agent.progress import progress_callback, report_progress
from chat.agent.runtime import DebugRuntime
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.agent.tools import EventAgent, ToolDefinition, ToolRegistry


def registry_with(**handlers: Any) -> ToolRegistry:
    registry = ToolRegistry()
    for name, handler in handlers.items():
        registry.register(ToolDefinition(name=name, description=name), handler, read_only=True)
    return registry


async def research(arguments: dict[str, Any]) -> str:
    for step in range(3):
        report_progress(step, 3, f"reading source {step + 1} of 3")
        await asyncio.sleep(0.01)
    return "3 sources read"


def crunch(arguments: dict[str, Any]) -> str:
    """A handler run in a thread: it reports without a total."""
    for rows in (100, 200):
        report_progress(rows)
        time.sleep(0.01)
    return "crunched"


async def heard_elsewhere(arguments: dict[str, Any]) -> str:
    """Progress heard by another task, as an MCP session hears a server's notifications."""
    callback = progress_callback()
    await asyncio.create_task(callback(1, 2, "half way"))
    await asyncio.sleep(0.01)
    return "done"


def call(id: str, name: str) -> ToolCall:
    return ToolCall(id=id, name=name, arguments="{}")


async def test_the_stream_yields_each_calls_progress_before_its_result() -> None:
    registry = registry_with(research=research, crunch=crunch, elsewhere=heard_elsewhere)
    agent = EventAgent(registry, ["research", "crunch", "elsewhere"])
    calls = [call("c1", "research"), call("c2", "crunch"), call("c3", "elsewhere")]

    items = [item async for item in agent.stream(calls)]

    heard = [item for item in items if isinstance(item, ToolCallProgress)]
    assert [(p.progress, p.total, p.message) for p in heard if p.tool_call_id == "c1"] == [
        (0, 3, "reading source 1 of 3"),
        (1, 3, "reading source 2 of 3"),
        (2, 3, "reading source 3 of 3"),
    ]
    assert [(p.progress, p.total) for p in heard if p.tool_call_id == "c2"] == [
        (100, None),
        (200, None),
    ]
    assert [p.message for p in heard if p.tool_call_id == "c3"] == ["half way"]
    results = [item for item in items if isinstance(item, ToolResult)]
    assert sorted(r.content for r in results) == ["3 sources read", "crunched", "done"]
    for result in results:
        after = items[items.index(result) + 1 :]
        mine = result.tool_call.id
        assert not [p for p in after if isinstance(p, ToolCallProgress) and p.tool_call_id == mine]


async def test_progress_reported_as_a_call_ends_never_follows_its_result() -> None:
    async def last_word(arguments: dict[str, Any]) -> str:
        report_progress(1, 1, "finished")
        return "ok"

    async def slower(arguments: dict[str, Any]) -> str:
        await asyncio.sleep(0.05)
        return "slower"

    agent = EventAgent(registry_with(last_word=last_word, slower=slower), ["last_word", "slower"])

    items = [item async for item in agent.stream([call("c1", "last_word"), call("c2", "slower")])]

    assert [type(item) for item in items] == [ToolResult, ToolResult]


async def test_outside_a_call_reporting_does_nothing() -> None:
    report_progress(1, 2, "nobody listens")
    await progress_callback()(1, 2, "nobody listens")
    result = await EventAgent(registry_with(research=research), ["research"]).execute(
        call("c1", "research")
    )
    assert result.content == "3 sources read"


async def test_the_run_yields_progress_between_a_calls_start_and_its_result() -> None:
    client = ScriptedChatClient([ScriptedTurn(tool_calls=(call("c1", "research"),)), "Read."])
    runtime = DebugRuntime(client=client, registry=registry_with(research=research))
    parameters = AgentParameters.model_validate(
        {"enabled_tools": ["research"]}, context={"registry": runtime.registry}
    )

    events = [
        event
        async for event in runtime.run(DebugRunRequest(parameters=parameters, user_message="go"))
    ]

    kinds = [type(event) for event in events if type(event) in RUNNING]
    assert kinds == [ToolCallStarted, *[ToolCallProgress] * 3, ToolCallFinished]
    progress = [event for event in events if isinstance(event, ToolCallProgress)]
    assert {(event.tool_call_id, event.step) for event in progress} == {("c1", 1)}


RUNNING = (ToolCallStarted, ToolCallProgress, ToolCallFinished)
