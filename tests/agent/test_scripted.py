from __future__ import annotations

import json

from chat.agent import history
from chat.agent.contracts import AgentParameters, DebugRunRequest
from chat.agent.errors import ChatClientError
from chat.agent.events import RunFinished, TextDelta, ToolCallFinished, TurnEnd, Usage
from chat.agent.messages import ChatMessage
from chat.agent.runtime import DebugRuntime
from chat.agent.scripted import SCRIPTED_LABEL, ScriptedChatClient, respond
from chat.agent.tools import ToolDefinition, default_registry

ALL = tuple(default_registry.names())


async def run(
    message: str, enabled: tuple[str, ...] = ALL, policies: dict[str, str] | None = None
) -> tuple[DebugRuntime, list[object]]:
    runtime = DebugRuntime(client=ScriptedChatClient())
    parameters = AgentParameters(enabled_tools=enabled, tool_policies=policies or {})
    req = DebugRunRequest(parameters=parameters, user_message=message)
    return runtime, [event async for event in runtime.run(req)]


async def test_asks_for_the_time_then_quotes_the_tool() -> None:
    runtime, events = await run("What time is it in Europe/Paris?")

    finished = [e.result for e in events if isinstance(e, ToolCallFinished)]
    assert [r.tool_call.name for r in finished] == ["get_current_time"]
    assert json.loads(finished[0].tool_call.arguments) == {"timezone": "Europe/Paris"}
    iso = json.loads(finished[0].content)["iso"]
    final = runtime.messages[-1]
    assert final.role == "assistant" and iso in (final.content or "")
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
    assert history.validate(runtime.messages) == []


async def test_two_tools_in_one_turn_when_asked_for_both() -> None:
    runtime, _ = await run(
        "Tell me the time and leave a handoff note for Sam", policies={"handoff_note": "run"}
    )

    assistant = runtime.messages[1]
    assert [c.name for c in assistant.tool_calls] == ["get_current_time", "handoff_note"]
    assert len({c.id for c in assistant.tool_calls}) == 2
    final = runtime.messages[-1].content or ""
    assert "Get current time" in final and "Handoff note" in final
    assert assistant.reasoning


async def test_plain_message_streams_word_by_word_with_usage() -> None:
    _, events = await run("hello there", enabled=())

    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 5
    assert "".join(deltas).startswith("You said: “hello there”")
    usage = [e for e in events if isinstance(e, Usage)]
    assert usage and usage[0].completion_tokens == len(deltas)


async def test_disabled_tool_is_explained_not_called() -> None:
    runtime, events = await run("what time is it?", enabled=("handoff_note",))

    assert not [e for e in events if isinstance(e, ToolCallFinished)]
    assert "not enabled" in (runtime.messages[-1].content or "")


async def test_tool_call_ids_stay_unique_across_turns() -> None:
    first = respond([ChatMessage(role="user", content="time?")], ALL)
    prior = [
        ChatMessage(role="user", content="time?"),
        ChatMessage(role="assistant", tool_calls=first.tool_calls),
        ChatMessage(role="tool", tool_call_id=first.tool_calls[0].id, content="{}"),
        ChatMessage(role="assistant", content="ok"),
        ChatMessage(role="user", content="time again?"),
    ]
    second = respond(prior, ALL)
    assert first.tool_calls[0].id != second.tool_calls[0].id


async def test_queue_of_turns_and_record_of_requests() -> None:
    client = ScriptedChatClient(["one"])
    assert client.label == SCRIPTED_LABEL
    items = [item async for item in client.stream([ChatMessage(role="user", content="x")])]
    assert isinstance(items[-1], TurnEnd) and items[-1].message.content == "one"
    assert client.requests[0]["messages"] == [{"role": "user", "content": "x"}]
    try:
        [item async for item in client.stream([ChatMessage(role="user", content="y")])]
    except ChatClientError as exc:
        assert "no turns left" in str(exc)
    else:
        raise AssertionError("an empty queue must fail")


async def test_calls_any_offered_tool_named_in_the_message() -> None:
    registry = default_registry
    registry.register(
        ToolDefinition(name="weather_report", description="w"), lambda _: "sunny", read_only=True
    )
    try:
        runtime, events = await run("Give me the weather report", enabled=("weather_report",))
    finally:
        registry.unregister("weather_report")
    finished = [e.result for e in events if isinstance(e, ToolCallFinished)]
    assert [r.tool_call.name for r in finished] == ["weather_report"]
    assert "Weather report: sunny" in (runtime.messages[-1].content or "")
