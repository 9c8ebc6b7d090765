"""MCP servers as tool sources, end to end: real servers from the SDK (streamable HTTP and stdio),
a strict local OpenAI provider, runs through the same path as the web."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from channels.db import database_sync_to_async

from chat import agent, runs
from chat.agent.contracts import AgentParameters
from chat.agent.events import StreamItem
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.models import Conversation, McpServer, McpTool, Run, ToolCall
from chat.runs import mcp as hub_module
from chat.testing import factories as make
from chat.testing.mcp_server import STDIO_COMMAND, McpHttpServer
from chat.testing.openai_script import text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer, client_for

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def http_server(url: str, name: str = "docs", **fields: Any) -> McpServer:
    return McpServer.objects.create(name=name, transport="http", url=url, **fields)


@database_sync_to_async
def stdio_server(name: str = "local", **fields: Any) -> McpServer:
    command, *args = STDIO_COMMAND
    return McpServer.objects.create(
        name=name, transport="stdio", command=command, args=args, **fields
    )


@database_sync_to_async
def conversation(*tools: str, allow: Sequence[str] = ()) -> Conversation:
    """A conversation choosing `tools` that runs each of them without asking: these tests are
    about MCP, not approvals (the test server's tools do not say they only read). A policy
    names one tool, not a server's set (`docs__*`): `allow` names those the test calls."""
    made = make.conversation(make.user(), "mcp")
    named = [*(tool for tool in tools if not tool.endswith("*")), *allow]
    made.parameters = {  # as the settings form stores a choice
        "enabled_tools": list(tools),
        "tool_policies": dict.fromkeys(named, "run"),
    }
    made.save()
    return made


async def run(made: Conversation, fake: FakeOpenAIServer, content: str = "go") -> Run:
    handle = await make.start_as_owner(made, content, client_for(fake.base_url))
    finished = await handle.task
    await finished.arefresh_from_db()
    return finished


def tool_message(fake: FakeOpenAIServer, request: int, call_id: str) -> str:
    messages = fake.requests[request].body["messages"]
    return next(m["content"] for m in messages if m.get("tool_call_id") == call_id)


async def test_discovery_stores_the_tools_under_their_exposed_names(
    docs_http: McpHttpServer, hub: hub_module.Hub
) -> None:
    server = await http_server(docs_http.url)
    tools = await hub.refresh(server)

    assert {tool.name for tool in tools} >= {"search_docs", "add", "slow", "fail", "big"}
    rows = {row.name: row async for row in McpTool.objects.filter(server=server)}
    assert rows["search_docs"].exposed_name == "docs__search_docs"
    assert rows["search_docs"].input_schema["required"] == ["query"]
    await server.arefresh_from_db()
    assert server.status == McpServer.Status.UP and server.checked_at is not None


async def test_a_conversation_calls_an_mcp_tool_through_a_strict_provider(
    docs_http: McpHttpServer, hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    await hub.refresh(await http_server(docs_http.url))
    made = await conversation("docs__search_docs", "get_current_time")
    fake_openai.enqueue(
        tool_turn([("c1", "docs__search_docs", '{"query": "deploys"}')]),
        text_turn("Deploys run from main."),
    )

    finished = await run(made, fake_openai, "How do deploys work?")

    assert finished.status == "completed"
    offered = [tool["function"]["name"] for tool in fake_openai.requests[0].body["tools"]]
    assert offered == ["docs__search_docs", "get_current_time"]
    reply = json.loads(tool_message(fake_openai, 1, "c1"))
    assert reply["matches"][0]["title"] == "Deploying"
    call = await ToolCall.objects.aget(run=finished)
    assert (call.status, call.server, call.name) == ("completed", "docs", "docs__search_docs")
    assert call.raw_result["structuredContent"]["query"] == "deploys"
    assert call.duration is not None
    assert fake_openai.pending == 0  # the strict provider refused nothing


async def test_errors_invalid_arguments_and_big_results_reach_the_model(
    docs_http: McpHttpServer, hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    await hub.refresh(await http_server(docs_http.url))
    made = await conversation(
        "docs__*", allow=["docs__fail", "docs__add", "docs__big", "docs__echo"]
    )
    fake_openai.enqueue(
        tool_turn(
            [
                ("c1", "docs__fail", '{"message": "index rebuilding"}'),
                ("c2", "docs__add", '{"a": "two", "b": 3}'),
                ("c3", "docs__big", '{"size": 1048576}'),
                ("c4", "docs__echo", '{"text": "naïve café ☕ 東京"}'),
            ]
        ),
        text_turn("Done."),
    )

    finished = await run(made, fake_openai)

    assert finished.status == "completed"
    calls = {c.call_id: c async for c in ToolCall.objects.filter(run=finished)}
    assert calls["c1"].status == "failed" and "index rebuilding" in calls["c1"].error
    assert calls["c2"].status == "failed" and calls["c2"].error.startswith("invalid arguments")
    assert calls["c2"].raw_result is None  # refused before the call
    assert "index rebuilding" in tool_message(fake_openai, 1, "c1")
    big = tool_message(fake_openai, 1, "c3")  # the model reads the first 100,000 characters
    assert big.startswith("0123456789abcdef" * 6_250) and big.endswith(
        "\n[cut: the first 100,000 of 1,048,576 characters; the whole result is kept in the "
        "run's log]"
    )
    assert tool_message(fake_openai, 1, "c4") == "naïve café ☕ 東京"
    assert calls["c3"].status == "completed" and calls["c3"].result == big
    assert len(calls["c3"].raw_result["content"][0]["text"]) == 1_048_576  # kept whole


async def test_two_servers_answer_a_turn_in_parallel(
    docs_http: McpHttpServer, hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    await hub.refresh(await http_server(docs_http.url))
    await hub.refresh(await stdio_server("local"))
    made = await conversation("docs__slow", "local__slow")
    fake_openai.enqueue(
        tool_turn(
            [("c1", "docs__slow", '{"seconds": 1}'), ("c2", "local__slow", '{"seconds": 1}')]
        ),
        text_turn("Both waited."),
    )
    started = asyncio.get_running_loop().time()
    finished = await run(made, fake_openai)

    assert finished.status == "completed"
    assert asyncio.get_running_loop().time() - started < 1.9  # not one after the other
    servers = {c.call_id: c.server async for c in ToolCall.objects.filter(run=finished)}
    assert servers == {"c1": "docs", "c2": "local"}
    assert tool_message(fake_openai, 1, "c1") == "waited 1 s"


async def test_stop_cancels_a_slow_mcp_tool(
    docs_http: McpHttpServer, hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    await hub.refresh(await http_server(docs_http.url))
    made = await conversation("docs__slow")
    fake_openai.enqueue(tool_turn([("c1", "docs__slow", '{"seconds": 30}')]))
    handle = await make.start_as_owner(made, "wait", client_for(fake_openai.base_url))
    for _ in range(200):  # until the call is under way
        if await ToolCall.objects.filter(run=handle.run).aexists():
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)
    assert runs.cancel_run(handle.run.pk)
    with contextlib.suppress(asyncio.CancelledError):
        await handle.task
    await handle.run.arefresh_from_db()
    assert handle.run.status == "cancelled"
    assert (await ToolCall.objects.aget(run=handle.run)).status == "cancelled"


async def test_a_server_killed_mid_call_fails_that_call_and_comes_back(
    hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    await hub.refresh(await stdio_server("local"))
    made = await conversation("local__crash", "local__pid")
    fake_openai.enqueue(
        tool_turn([("c1", "local__pid", "{}")]),
        tool_turn([("c2", "local__crash", "{}")]),
        tool_turn([("c3", "local__pid", "{}")]),
        text_turn("It came back."),
    )

    finished = await run(made, fake_openai)

    assert finished.status == "completed"
    calls = {c.call_id: c async for c in ToolCall.objects.filter(run=finished)}
    assert calls["c2"].status == "failed"
    assert "MCP server local" in calls["c2"].error and "stopped" in calls["c2"].error
    assert calls["c3"].status == "completed"
    assert calls["c1"].result != calls["c3"].result  # a new process answered


async def test_a_changed_tool_list_is_stored_and_offered(
    hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    server = await stdio_server("local")
    await hub.refresh(server)
    assert not await McpTool.objects.filter(name="late_tool").aexists()
    made = await conversation("local__*", allow=["local__grow", "local__late_tool"])
    fake_openai.enqueue(tool_turn([("c1", "local__grow", "{}")]), text_turn("grown"))
    await run(made, fake_openai)
    for _ in range(100):
        if await McpTool.objects.filter(exposed_name="local__late_tool").aexists():
            break
        await asyncio.sleep(0.05)
    fake_openai.enqueue(tool_turn([("c2", "local__late_tool", "{}")]), text_turn("late"))

    finished = await run(made, fake_openai, "again")

    offered = [tool["function"]["name"] for tool in fake_openai.requests[2].body["tools"]]
    assert "local__late_tool" in offered
    assert tool_message(fake_openai, 3, "c2") == "late and here"
    assert finished.status == "completed"


async def test_each_run_gets_a_registry_of_its_own_and_the_hub_writes_none(
    hub: hub_module.Hub,
) -> None:
    docs = McpHttpServer("docs").start()
    try:
        server = await http_server(docs.url)
        await hub.refresh(server)
        chosen = agent.AgentParameters.from_stored(
            {"enabled_tools": ["docs__*", "docs__gone", "get_current_time"]}
        )
        request = agent.DebugRunRequest(parameters=chosen, user_message="go")
        first = await hub.prepare(request)
    finally:
        docs.stop()
    await hub.close()  # the next connection finds the server gone
    second = await hub.prepare(request)

    assert first.registry is not second.registry
    assert "docs__pid" in first.registry and "docs__pid" not in agent.default_registry
    assert first.registry.get("get_current_time") is agent.default_registry.get("get_current_time")
    expanded = first.request.parameters.enabled_tools
    assert "docs__pid" in expanded and "docs__*" not in expanded
    gone = first.registry.withheld("docs__gone")
    assert gone is not None and "no enabled server lists it" in gone.reason
    withheld = second.registry.withheld("docs__pid")
    assert withheld is not None and withheld.reason.startswith("MCP server docs is unavailable: ")
    assert "docs__pid" in first.registry  # the second run's preparation changed nothing here


async def test_a_server_that_is_down_is_marked_and_its_tools_not_offered(
    hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    server = await stdio_server("local")
    await hub.refresh(server)
    await hub.close()
    await McpServer.objects.filter(pk=server.pk).aupdate(command="/nonexistent/mcp-server")
    made = await conversation("local__add", "get_current_time")
    fake_openai.enqueue(
        tool_turn([("c1", "local__add", '{"a": 2, "b": 3}')]),  # called all the same
        text_turn("No docs today."),
    )

    finished = await run(made, fake_openai)

    assert finished.status == "completed"
    offered = [tool["function"]["name"] for tool in fake_openai.requests[0].body["tools"]]
    assert offered == ["get_current_time"]
    call = await ToolCall.objects.aget(run=finished)
    assert (call.failure, call.server) == ("unavailable", "local")
    assert call.error.startswith("MCP server local is unavailable: ")
    assert call.error in tool_message(fake_openai, 1, "c1")
    await server.arefresh_from_db()
    assert server.status == McpServer.Status.DOWN and server.error
    made_again = await Conversation.objects.aget(pk=made.pk)
    assert "local__add" in made_again.agent_parameters().enabled_tools  # the choice is kept


async def test_an_http_server_restarted_is_reached_again(
    hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    first = McpHttpServer("docs").start()
    try:
        await hub.refresh(await http_server(first.url))
        made = await conversation("docs__pid")
        fake_openai.enqueue(tool_turn([("c1", "docs__pid", "{}")]), text_turn("one"))
        await run(made, fake_openai)
    finally:
        first.stop()
    with McpHttpServer("docs", port=first.port):
        fake_openai.enqueue(tool_turn([("c2", "docs__pid", "{}")]), text_turn("two"))
        finished = await run(made, fake_openai, "again")

    call = await ToolCall.objects.aget(run=finished)
    assert call.status == "completed", call.error
    assert tool_message(fake_openai, 1, "c1") != tool_message(fake_openai, 3, "c2")


class GatedModel(ScriptedChatClient):
    """Scripted turns, each one asked for (`asked[n]` is set) and then held until the test
    opens its gate (`gates[n]`): a run paused at a known step."""

    def __init__(self, turns: list[ScriptedTurn]) -> None:
        super().__init__(turns)
        self.asked = [asyncio.Event() for _ in turns]
        self.gates = [asyncio.Event() for _ in turns]

    async def stream(
        self,
        messages: Sequence[agent.ChatMessage],
        *,
        tools: Sequence[agent.ToolDefinition] = (),
        parameters: AgentParameters = AgentParameters(),
    ) -> AsyncIterator[StreamItem]:
        turn = len(self.requests)
        self.asked[turn].set()
        await self.gates[turn].wait()
        async for item in super().stream(messages, tools=tools, parameters=parameters):
            yield item


def calls_pid(call_id: str) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=(agent.ToolCall(id=call_id, name="docs__pid", arguments="{}"),))


async def test_a_server_down_as_a_second_run_starts_leaves_the_first_runs_tools(
    hub: hub_module.Hub,
) -> None:
    docs = McpHttpServer("docs").start()
    try:
        await hub.refresh(await http_server(docs.url))
        one, two = await conversation("docs__pid"), await conversation("docs__pid")
        model = GatedModel([calls_pid("c1"), calls_pid("c2"), ScriptedTurn("Done.")])
        first = await make.start_as_owner(one, "go", model)
        await model.asked[0].wait()  # the first run is prepared: its tools are offered
    finally:
        docs.stop()
    model.gates[0].set()  # its first call finds the server gone
    await model.asked[1].wait()

    second_model = ScriptedChatClient(["The docs are down."])
    second = await make.start_as_owner(two, "go", second_model)
    assert (await second.task).status == "completed"
    assert "tools" not in second_model.requests[0]  # the server was down as it started
    for gate in model.gates[1:]:
        gate.set()
    await first.task

    calls = {c.call_id: c async for c in ToolCall.objects.filter(run=first.run)}
    assert {call_id: c.failure for call_id, c in calls.items()} == {
        "c1": "unavailable",
        "c2": "unavailable",
    }
    assert "MCP server docs" in calls["c2"].error and "not available" not in calls["c2"].error
