from __future__ import annotations

import asyncio
import json

from chat.agent import history
from chat.agent.contracts import AgentParameters, DebugRunRequest
from chat.agent.errors import ProviderHTTPError, StreamError
from chat.agent.events import (
    ModelCallFailed,
    ModelRequestSent,
    RunFinished,
    StepStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnEnd,
    Usage,
)
from chat.agent.messages import ChatMessage, ToolCall
from chat.agent.runtime import DebugRuntime
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.agent.tools import ToolDefinition, ToolRegistry, default_registry

ALL_TOOLS = ("get_current_time", "handoff_note")


def request(message: str = "hi", **parameters: object) -> DebugRunRequest:
    return DebugRunRequest(
        parameters=AgentParameters.model_validate(parameters), user_message=message
    )


async def collect(runtime: DebugRuntime, req: DebugRunRequest) -> list[object]:
    return [event async for event in runtime.run(req)]


def call(id: str, name: str, arguments: dict[str, object] | None = None) -> ToolCall:
    return ToolCall(id=id, name=name, arguments=json.dumps(arguments or {}))


async def test_second_request_carries_the_strict_tool_call_history() -> None:
    client = ScriptedChatClient(
        [
            ScriptedTurn(tool_calls=(call("call_1", "handoff_note", {"note": "ship it"}),)),
            "Done.",
        ]
    )
    runtime = DebugRuntime(client=client)
    events = await collect(
        runtime,
        request(
            "leave a note",
            system_prompts=["Be brief."],
            enabled_tools=["handoff_note"],
            tool_policies={"handoff_note": "run"},
        ),
    )

    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
    second = client.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert second[2]["tool_calls"][0]["id"] == "call_1"
    assert second[2]["content"] == ""
    assert second[3]["tool_call_id"] == "call_1"
    assert json.loads(second[3]["content"])["status"] == "recorded"
    assert history.validate(runtime.messages) == []


async def test_one_assistant_message_per_turn_with_text_and_all_calls() -> None:
    client = ScriptedChatClient(
        [
            ScriptedTurn(
                text="Checking both.",
                tool_calls=(
                    call("a", "get_current_time"),
                    call("b", "handoff_note", {"note": "x"}),
                ),
            ),
            "All done.",
        ]
    )
    runtime = DebugRuntime(client=client)
    events = await collect(
        runtime, request(enabled_tools=ALL_TOOLS, tool_policies={"handoff_note": "run"})
    )

    roles = [m.role for m in runtime.messages]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
    assistant = runtime.messages[1]
    assert assistant.content == "Checking both."
    assert [c.id for c in assistant.tool_calls] == ["a", "b"]
    assert [m.tool_call_id for m in runtime.messages[2:4]] == ["a", "b"]
    started = [e.tool_call.id for e in events if isinstance(e, ToolCallStarted)]
    finished = [e.result.tool_call.id for e in events if isinstance(e, ToolCallFinished)]
    assert started == ["a", "b"] and sorted(finished) == ["a", "b"]
    steps = [e.step for e in events if isinstance(e, StepStarted)]
    assert steps == [1, 2]


async def test_replies_follow_call_order_when_tools_finish_out_of_order() -> None:
    registry = ToolRegistry()

    async def slow(arguments: dict[str, object]) -> str:
        await asyncio.sleep(0.05)
        return "slow"

    async def fast(arguments: dict[str, object]) -> str:
        return "fast"

    registry.register(ToolDefinition(name="slow", description="s"), slow, read_only=True)
    registry.register(ToolDefinition(name="fast", description="f"), fast, read_only=True)
    client = ScriptedChatClient(
        [ScriptedTurn(tool_calls=(call("1", "slow"), call("2", "fast"))), "ok"]
    )
    runtime = DebugRuntime(client=client, registry=registry)
    req = DebugRunRequest.model_validate(
        {"parameters": {"enabled_tools": ["slow", "fast"]}, "user_message": "go"},
        context={"registry": registry},
    )
    events = await collect(runtime, req)

    finished = [e.result.content for e in events if isinstance(e, ToolCallFinished)]
    assert finished == ["fast", "slow"]
    assert [m.content for m in runtime.messages if m.role == "tool"] == ["slow", "fast"]


async def test_max_event_loops_ends_failed_with_valid_history() -> None:
    turns = [ScriptedTurn(tool_calls=(call(f"c{i}", "get_current_time"),)) for i in range(5)]
    runtime = DebugRuntime(client=ScriptedChatClient(turns))
    events = await collect(runtime, request(max_event_loops=3, enabled_tools=ALL_TOOLS))

    final = events[-1]
    assert isinstance(final, RunFinished)
    assert final.status == "failed" and "max_event_loops" in (final.error or "")
    assert final.steps == 3
    assert history.validate(runtime.messages) == []
    assert runtime.messages[-1].role == "tool"


async def test_provider_error_mid_stream_keeps_partial_text() -> None:
    error = StreamError("the connection dropped mid-stream")
    client = ScriptedChatClient([ScriptedTurn(text="Half an answer", error=error)])
    runtime = DebugRuntime(client=client)
    events = await collect(runtime, request())

    failed = [e for e in events if isinstance(e, ModelCallFailed)]
    assert failed and "dropped" in failed[0].message
    assert failed[0].request_body is not None
    turn_end = [e for e in events if isinstance(e, TurnEnd)]
    assert turn_end[0].message.content == "Half an answer"
    assert turn_end[0].finish_reason is None
    assert isinstance(events[-1], RunFinished) and events[-1].status == "failed"
    assert runtime.messages[-1].content == "Half an answer"
    assert history.validate(runtime.messages) == []


async def test_provider_http_error_before_any_text_adds_no_message() -> None:
    client = ScriptedChatClient(
        [ScriptedTurn(error=ProviderHTTPError("Rate limit reached", status_code=429))]
    )
    runtime = DebugRuntime(client=client)
    events = await collect(runtime, request())

    assert not [e for e in events if isinstance(e, TurnEnd)]
    final = events[-1]
    assert isinstance(final, RunFinished)
    assert final.error == "HTTP 429: Rate limit reached"
    assert [m.role for m in runtime.messages] == ["user"]


async def test_length_and_empty_replies_fail_clearly() -> None:
    cut = DebugRuntime(client=ScriptedChatClient([ScriptedTurn("cut o", finish_reason="length")]))
    events = await collect(cut, request())
    assert isinstance(events[-1], RunFinished)
    assert events[-1].status == "failed" and "length" in (events[-1].error or "")

    empty = DebugRuntime(client=ScriptedChatClient([ScriptedTurn("")]))
    events = await collect(empty, request())
    assert isinstance(events[-1], RunFinished)
    assert events[-1].error == "The model returned an empty reply."


async def test_tool_failures_become_replies_and_the_loop_goes_on() -> None:
    client = ScriptedChatClient(
        [
            ScriptedTurn(
                tool_calls=(
                    ToolCall(id="x", name="get_current_time", arguments="{not json"),
                    call("y", "not_offered"),
                )
            ),
            "Sorry.",
        ]
    )
    runtime = DebugRuntime(client=client)
    events = await collect(runtime, request(enabled_tools=["get_current_time"]))

    results = {e.result.tool_call.id: e.result for e in events if isinstance(e, ToolCallFinished)}
    assert results["x"].status == "failed" and "JSON" in (results["x"].error or "")
    assert results["y"].status == "failed" and "not available" in (results["y"].error or "")
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
    assert history.validate(runtime.messages) == []


async def test_history_and_parameters_reach_the_request() -> None:
    client = ScriptedChatClient(["fine"])
    runtime = DebugRuntime(client=client)
    req = DebugRunRequest(
        parameters=AgentParameters(
            model="m1",
            temperature=0.2,
            max_tokens=50,
            pre_messages=(ChatMessage(role="assistant", content="Hi, ask away."),),
        ),
        history=(ChatMessage(role="user", content="a"), ChatMessage(role="assistant", content="b")),
        user_message="c",
    )
    events = await collect(runtime, req)

    body = client.requests[0]
    assert body["model"] == "m1" and body["temperature"] == 0.2 and body["max_tokens"] == 50
    assert "tools" not in body and "tool_choice" not in body
    assert [m["content"] for m in body["messages"]] == ["Hi, ask away.", "a", "b", "c"]
    sent = [e for e in events if isinstance(e, ModelRequestSent)]
    assert sent[0].body is body
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "fine"


async def test_running_usage_totals_count_once_per_step() -> None:
    class RepeatingUsageClient(ScriptedChatClient):
        async def stream(self, messages, *, tools=(), parameters=AgentParameters()):  # type: ignore[no-untyped-def]
            async for item in super().stream(messages, tools=tools, parameters=parameters):
                if isinstance(item, Usage):
                    yield Usage(item.prompt_tokens, 1, item.prompt_tokens + 1)
                yield item

    runtime = DebugRuntime(client=RepeatingUsageClient([ScriptedTurn("a b", usage=(7, 2))]))
    events = await collect(runtime, request())
    final = events[-1]
    assert isinstance(final, RunFinished)
    assert final.usage == Usage(7, 2, 9)


async def test_each_runtime_executes_with_a_registry_of_its_own() -> None:
    first, second = (
        DebugRuntime(client=ScriptedChatClient()),
        DebugRuntime(client=ScriptedChatClient()),
    )
    first.registry.withhold("get_current_time", "not here for this run")

    assert first.registry is not second.registry
    assert first.registry is not default_registry
    assert "get_current_time" in second.registry and "get_current_time" in default_registry
    assert second.registry.get("get_current_time") is default_registry.get("get_current_time")


async def test_a_withheld_tool_is_not_offered_and_its_call_answered_unavailable() -> None:
    registry = default_registry.copy()
    registry.withhold("docs__pid", "MCP server docs is unavailable: refused", source="docs")
    client = ScriptedChatClient([ScriptedTurn(tool_calls=(call("c1", "docs__pid"),)), "Down."])
    req = DebugRunRequest.model_validate(
        {"parameters": {"enabled_tools": ["docs__pid", "handoff_note"]}, "user_message": "go"},
        context={"registry": registry},
    )

    events = await collect(DebugRuntime(client=client, registry=registry), req)

    offered = [tool["function"]["name"] for tool in client.requests[0]["tools"]]
    assert offered == ["handoff_note"]
    [finished] = [e.result for e in events if isinstance(e, ToolCallFinished)]
    assert (finished.failure, finished.source) == ("unavailable", "docs")
    assert finished.error == "MCP server docs is unavailable: refused"
