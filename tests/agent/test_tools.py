"""Tests of chat.agent.tools: the registry, EventAgent and the built-in tools."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator
from datetime import datetime, timedelta
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from chat.agent.events import ToolResult
from chat.agent.messages import ChatMessage, ToolCall
from chat.agent.tools import (
    DEFAULT_TOOL_TIMEOUT,
    EventAgent,
    ToolDefinition,
    ToolRegistry,
    default_registry,
    humanize,
)

OBJECT: dict[str, Any] = {"type": "object", "properties": {}}
STRICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
    "required": ["query"],
    "additionalProperties": False,
}


def call(name: str, arguments: str = "{}", call_id: str = "call_1") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def error_of(result: ToolResult) -> str:
    assert result.status == "failed"
    payload = json.loads(result.content)
    assert set(payload) == {"error"}
    assert result.error == payload["error"]
    error = payload["error"]
    assert isinstance(error, str)
    return error


def registry_with(
    name: str,
    handler: Any,
    *,
    timeout: float = DEFAULT_TOOL_TIMEOUT,
    parameters: dict[str, Any] | None = None,
) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(
        ToolDefinition(name=name, description=f"{name} tool", parameters=parameters or OBJECT),
        handler,
        timeout=timeout,
    )
    return registry


def sleeper(delay: float, value: str) -> Any:
    async def handler(arguments: dict[str, Any]) -> str:
        await asyncio.sleep(delay)
        return value

    return handler


# --- humanize -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("search_cards", "Search cards"),
        ("get_current_time", "Get current time"),
        ("handoff_note", "Handoff note"),
        ("fetch-url", "Fetch url"),
        ("a.b", "A b"),
        ("__private__", "Private"),
        ("x", "X"),
        ("", "Unnamed tool"),
        ("___", "Unnamed tool"),
    ],
)
def test_humanize(name: str, expected: str) -> None:
    assert humanize(name) == expected


# --- registry and definitions ---------------------------------------------------------------


def test_register_contains_get_and_names() -> None:
    registry = ToolRegistry()
    assert "search_cards" not in registry
    assert registry.names() == []

    def handler(arguments: dict[str, Any]) -> str:
        return "ok"

    definition = ToolDefinition(name="search_cards", description="Search the cards.")
    tool = registry.register(definition, handler, timeout=5)
    assert "search_cards" in registry
    assert 42 not in registry
    assert registry.get("search_cards") is tool
    assert registry.get("missing") is None
    assert (tool.definition, tool.handler, tool.timeout) == (definition, handler, 5)
    registry.register(ToolDefinition(name="alpha", description="A."), handler)
    assert registry.names() == ["alpha", "search_cards"]


def test_definitions_keep_requested_order_and_skip_unknown() -> None:
    registry = ToolRegistry()
    for name in ("a", "b", "c"):
        registry.register(ToolDefinition(name=name, description=name), lambda _: None)
    assert [d.name for d in registry.definitions(["c", "zzz", "a"])] == ["c", "a"]
    assert registry.definitions([]) == []


def test_unregister() -> None:
    registry = registry_with("gone", lambda _: None)
    registry.unregister("gone")
    registry.unregister("never-there")
    assert "gone" not in registry


def test_decorator_registers_and_returns_the_handler() -> None:
    registry = ToolRegistry()

    @registry.tool(name="echo", description="Echo.", parameters=OBJECT, timeout=2)
    def echo(arguments: dict[str, Any]) -> dict[str, Any]:
        return arguments

    tool = registry.get("echo")
    assert tool is not None
    assert tool.handler is echo
    assert tool.timeout == 2
    assert echo({"a": 1}) == {"a": 1}


def test_fresh_registry_does_not_share_default_tools() -> None:
    assert "get_current_time" not in ToolRegistry()
    assert {"get_current_time", "handoff_note"} <= set(default_registry.names())


def test_a_copy_shares_the_tools_and_changes_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    original = registry_with("echo", lambda a: a)
    echo = original.get("echo")

    def no_second_check(schema: Any) -> None:
        raise AssertionError("a copied tool's schema is checked again")

    monkeypatch.setattr(jsonschema.Draft202012Validator, "check_schema", no_second_check)
    copy = original.copy()
    monkeypatch.undo()
    copy.register(ToolDefinition(name="mine", description="m"), lambda a: a)
    original.withhold("echo", "gone for now")

    assert copy.get("echo") is echo  # the same Tool object, not a new one
    assert copy.names() == ["echo", "mine"] and copy.withheld("echo") is None
    assert original.names() == [] and "mine" not in original


def test_a_withheld_tool_is_known_but_not_offered() -> None:
    registry = registry_with("echo", lambda a: a)
    registry.withhold("docs__pid", "MCP server docs is unavailable: refused", source="docs")

    assert "docs__pid" not in registry
    assert registry.offered(["docs__pid", "echo"]) == ["echo"]
    assert [d.name for d in registry.definitions(["docs__pid", "echo"])] == ["echo"]
    withheld = registry.withheld("docs__pid")
    assert withheld is not None and withheld.source == "docs"
    registry.register(ToolDefinition(name="docs__pid", description="p"), lambda a: 1)
    assert registry.withheld("docs__pid") is None and "docs__pid" in registry


def test_tool_definition_to_openai_shape() -> None:
    definition = ToolDefinition(
        name="search_cards", description="Search the cards.", parameters=STRICT_SCHEMA
    )
    assert definition.to_openai() == {
        "type": "function",
        "function": {
            "name": "search_cards",
            "description": "Search the cards.",
            "parameters": STRICT_SCHEMA,
        },
    }


def test_tool_definition_default_parameters_is_an_empty_object_schema() -> None:
    definition = ToolDefinition(name="t", description="d")
    assert definition.parameters == {"type": "object", "properties": {}}
    assert definition.to_openai()["function"]["parameters"] == {"type": "object", "properties": {}}


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dots.are.bad", "é"])
def test_tool_definition_rejects_bad_names(name: str) -> None:
    with pytest.raises(ValidationError):
        ToolDefinition(name=name, description="d")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "nope"},
        {"type": "object", "properties": {"a": {"type": 5}}},
        {"type": "object", "required": "query"},
    ],
)
def test_invalid_json_schema_rejected_at_register(schema: dict[str, Any]) -> None:
    registry = ToolRegistry()
    with pytest.raises(jsonschema.SchemaError):
        registry.register(ToolDefinition(name="bad", description="d", parameters=schema), print)
    assert "bad" not in registry


# --- EventAgent: failures become JSON error replies -----------------------------------------


async def test_unknown_tool_fails_with_json_error() -> None:
    agent = EventAgent(ToolRegistry(), ["missing"])
    result = await agent.execute(call("missing"))
    error = error_of(result)
    assert "'missing' is not available" in error
    assert result.tool_call == call("missing")


async def test_disabled_tool_fails_and_is_not_run() -> None:
    ran: list[bool] = []
    registry = registry_with("secret", lambda _: ran.append(True))
    registry.register(ToolDefinition(name="public", description="p"), lambda _: None)
    result = await EventAgent(registry, ["public"]).execute(call("secret"))
    error = error_of(result)
    assert "'secret' is not available" in error
    assert "offered: public" in error
    assert ran == []


async def test_nothing_enabled_says_none_offered() -> None:
    result = await EventAgent(registry_with("t", lambda _: "x"), []).execute(call("t"))
    assert "offered: none" in error_of(result)


async def test_a_withheld_tool_is_answered_as_unavailable_never_unknown() -> None:
    ran: list[bool] = []
    registry = registry_with("echo", lambda _: ran.append(True))
    registry.withhold("docs__pid", "MCP server docs is unavailable: refused", source="docs")

    result = await EventAgent(registry, ["echo", "docs__pid"]).execute(call("docs__pid"))

    assert error_of(result) == "MCP server docs is unavailable: refused"
    assert (result.failure, result.source) == ("unavailable", "docs")
    assert ran == []


async def test_not_available_lists_only_what_was_offered() -> None:
    registry = registry_with("echo", lambda _: None)
    registry.withhold("docs__pid", "MCP server docs is unavailable: refused")
    enabled = ["echo", "docs__pid", "module_not_loaded"]

    result = await EventAgent(registry, enabled).execute(call("launch_rockets"))

    assert error_of(result) == "tool 'launch_rockets' is not available (offered: echo)"
    assert result.failure == "unknown_tool"


@pytest.mark.parametrize("arguments", ["{not json", '{"a": ', "nul"])
async def test_arguments_not_json(arguments: str) -> None:
    agent = EventAgent(registry_with("t", lambda _: "x"), ["t"])
    assert "not valid JSON" in error_of(await agent.execute(call("t", arguments)))


@pytest.mark.parametrize("arguments", ["[1, 2]", '"text"', "3", "null"])
async def test_arguments_not_an_object(arguments: str) -> None:
    agent = EventAgent(registry_with("t", lambda _: "x"), ["t"])
    assert "invalid arguments: not a JSON object" in error_of(
        await agent.execute(call("t", arguments))
    )


@pytest.mark.parametrize("arguments", ["", "   "])
async def test_blank_arguments_mean_an_empty_object(arguments: str) -> None:
    seen: list[dict[str, Any]] = []

    def handler(arguments: dict[str, Any]) -> str:
        seen.append(arguments)
        return "ok"

    agent = EventAgent(registry_with("t", handler), ["t"])
    result = await agent.execute(call("t", arguments))
    assert (result.status, result.content, seen) == ("completed", "ok", [{}])


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("{}", "'query' is a required property"),
        ('{"query": "x", "extra": 1}', "Additional properties are not allowed"),
        ('{"query": 5}', "at query"),
        ('{"query": "x", "limit": 0}', "at limit"),
    ],
)
async def test_arguments_not_matching_the_schema(arguments: str, expected: str) -> None:
    ran: list[bool] = []
    registry = registry_with("search", lambda _: ran.append(True), parameters=STRICT_SCHEMA)
    result = await EventAgent(registry, ["search"]).execute(call("search", arguments))
    error = error_of(result)
    assert "invalid arguments" in error
    assert expected in error
    assert ran == []


async def test_sync_handler_raising() -> None:
    def boom(arguments: dict[str, Any]) -> str:
        raise RuntimeError("disk on fire")

    result = await EventAgent(registry_with("t", boom), ["t"]).execute(call("t"))
    assert error_of(result) == "RuntimeError: disk on fire"


async def test_async_handler_raising() -> None:
    async def boom(arguments: dict[str, Any]) -> str:
        await asyncio.sleep(0)
        raise KeyError("nope")

    result = await EventAgent(registry_with("t", boom), ["t"]).execute(call("t"))
    assert error_of(result) == "KeyError: 'nope'"


async def test_per_tool_timeout() -> None:
    registry = registry_with("slow", sleeper(5, "late"), timeout=0.05)
    started = time.monotonic()
    result = await EventAgent(registry, ["slow"]).execute(call("slow"))
    elapsed = time.monotonic() - started
    assert error_of(result) == "tool 'slow' timed out after 0.05s"
    assert elapsed < 1
    assert result.duration >= 0.04


async def test_sync_handler_timeout() -> None:
    registry = registry_with("slow", lambda _: time.sleep(0.3), timeout=0.05)
    result = await EventAgent(registry, ["slow"]).execute(call("slow"))
    assert "timed out" in error_of(result)


async def test_failures_never_raise_and_keep_the_call() -> None:
    registry = registry_with("search", lambda _: 1 / 0, parameters=STRICT_SCHEMA)
    agent = EventAgent(registry, ["search"])
    calls = [
        call("search", '{"query": "x"}', "c1"),
        call("missing", "{}", "c2"),
        call("search", "{", "c3"),
        call("search", "[]", "c4"),
        call("search", "{}", "c5"),
    ]
    results = await agent.handle(calls)
    assert [r.tool_call for r in results] == calls
    assert [r.status for r in results] == ["failed"] * 5
    assert error_of(results[0]).startswith("ZeroDivisionError")
    assert all(json.loads(r.content)["error"] for r in results)


# --- EventAgent: successful calls -----------------------------------------------------------


async def test_sync_handler_receives_parsed_arguments() -> None:
    seen: list[dict[str, Any]] = []

    def handler(arguments: dict[str, Any]) -> str:
        seen.append(arguments)
        return "found 3 cards"

    registry = registry_with("search", handler, parameters=STRICT_SCHEMA)
    result = await EventAgent(registry, ["search"]).execute(
        call("search", '{"query": "cats", "limit": 3}')
    )
    assert (result.status, result.content, result.error) == ("completed", "found 3 cards", None)
    assert seen == [{"query": "cats", "limit": 3}]
    assert result.duration >= 0


async def test_async_handler() -> None:
    async def handler(arguments: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"echo": arguments}

    result = await EventAgent(registry_with("t", handler), ["t"]).execute(call("t", '{"a": 1}'))
    assert result.status == "completed"
    assert json.loads(result.content) == {"echo": {"a": 1}}


async def test_sync_handler_returning_an_awaitable_is_awaited() -> None:
    async def inner() -> str:
        return "from coroutine"

    result = await EventAgent(registry_with("t", lambda _: inner()), ["t"]).execute(call("t"))
    assert (result.status, result.content) == ("completed", "from coroutine")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": 1}, '{"a": 1}'),
        ([1, "two"], '[1, "two"]'),
        (42, "42"),
        (None, "null"),
        (True, "true"),
        ({"word": "café"}, '{"word": "café"}'),
        ("plain text", "plain text"),
        ('{"already": "json"}', '{"already": "json"}'),
    ],
)
async def test_results_are_json_encoded_unless_strings(value: Any, expected: str) -> None:
    result = await EventAgent(registry_with("t", lambda _: value), ["t"]).execute(call("t"))
    assert (result.status, result.content) == ("completed", expected)


async def test_unserialisable_values_fall_back_to_str() -> None:
    moment = datetime(2025, 1, 2, 3, 4, 5)
    result = await EventAgent(registry_with("t", lambda _: {"at": moment}), ["t"]).execute(
        call("t")
    )
    assert json.loads(result.content) == {"at": str(moment)}


@pytest.mark.parametrize("kind", ["tuple_keys", "circular"])
async def test_unencodable_result_becomes_a_failed_reply(kind: str) -> None:
    circular: list[Any] = []
    circular.append(circular)
    value: Any = {(1, 2): "x"} if kind == "tuple_keys" else circular
    result = await EventAgent(registry_with("t", lambda _: value), ["t"]).execute(call("t"))
    assert result.status == "failed"
    assert json.loads(result.content)["error"]


async def test_result_message_is_the_tool_reply() -> None:
    result = await EventAgent(registry_with("t", lambda _: "ok"), ["t"]).execute(
        call("t", call_id="call_42")
    )
    assert result.message == ChatMessage(role="tool", content="ok", tool_call_id="call_42")


# --- concurrency ----------------------------------------------------------------------------


async def test_handle_runs_calls_concurrently() -> None:
    registry = registry_with("a", sleeper(0.2, "A"))
    registry.register(ToolDefinition(name="b", description="b"), sleeper(0.2, "B"))
    agent = EventAgent(registry, ["a", "b"])
    started = time.monotonic()
    results = await agent.handle([call("a", call_id="1"), call("b", call_id="2")])
    elapsed = time.monotonic() - started
    assert [r.content for r in results] == ["A", "B"]
    assert elapsed < 0.35


async def test_handle_runs_sync_handlers_concurrently() -> None:
    def blocking(arguments: dict[str, Any]) -> str:
        time.sleep(0.2)
        return "A"

    registry = registry_with("a", blocking)
    agent = EventAgent(registry, ["a"])
    started = time.monotonic()
    results = await agent.handle([call("a", call_id="1"), call("a", call_id="2")])
    assert [r.content for r in results] == ["A", "A"]
    assert time.monotonic() - started < 0.35


async def test_handle_returns_results_in_call_order() -> None:
    finished: list[str] = []

    def tracked(delay: float, value: str) -> Any:
        async def handler(arguments: dict[str, Any]) -> str:
            await asyncio.sleep(delay)
            finished.append(value)
            return value

        return handler

    registry = registry_with("slow", tracked(0.2, "slow"))
    registry.register(ToolDefinition(name="fast", description="f"), tracked(0.01, "fast"))
    agent = EventAgent(registry, ["slow", "fast"])
    results = await agent.handle([call("slow", call_id="1"), call("fast", call_id="2")])
    assert finished == ["fast", "slow"]
    assert [r.content for r in results] == ["slow", "fast"]
    assert [r.tool_call.id for r in results] == ["1", "2"]


async def test_handle_with_no_calls() -> None:
    assert await EventAgent(ToolRegistry(), []).handle([]) == []


async def test_stream_yields_in_completion_order() -> None:
    registry = registry_with("slow", sleeper(0.2, "slow"))
    registry.register(ToolDefinition(name="fast", description="f"), sleeper(0.01, "fast"))
    registry.register(ToolDefinition(name="mid", description="m"), sleeper(0.1, "mid"))
    agent = EventAgent(registry, ["slow", "fast", "mid"])
    calls = [call("slow", call_id="1"), call("fast", call_id="2"), call("mid", call_id="3")]
    started = time.monotonic()
    results = [result async for result in agent.stream(calls)]
    assert [r.content for r in results] == ["fast", "mid", "slow"]
    assert [r.tool_call.id for r in results] == ["2", "3", "1"]
    assert time.monotonic() - started < 0.35


async def test_stream_includes_failures() -> None:
    registry = registry_with("ok", sleeper(0.05, "fine"))
    agent = EventAgent(registry, ["ok"])
    results = [r async for r in agent.stream([call("ok", call_id="1"), call("nope", call_id="2")])]
    assert [(r.tool_call.id, r.status) for r in results] == [("2", "failed"), ("1", "completed")]


async def test_stream_closed_early_cancels_the_rest() -> None:
    cancelled = asyncio.Event()

    async def forever(arguments: dict[str, Any]) -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    registry = registry_with("fast", sleeper(0, "fast"))
    registry.register(ToolDefinition(name="forever", description="f"), forever)
    agent = EventAgent(registry, ["fast", "forever"])
    stream = agent.stream([call("forever", call_id="1"), call("fast", call_id="2")])
    assert isinstance(stream, AsyncGenerator)
    first = await anext(stream)
    assert first.content == "fast"
    await stream.aclose()
    await asyncio.wait_for(cancelled.wait(), timeout=1)
    assert cancelled.is_set()


# --- built-in tools -------------------------------------------------------------------------


BUILTINS = EventAgent(default_registry, ["get_current_time", "handoff_note"])


def test_builtin_definitions() -> None:
    [time_tool, note_tool] = default_registry.definitions(["get_current_time", "handoff_note"])
    assert time_tool.to_openai()["function"]["name"] == "get_current_time"
    assert note_tool.parameters["required"] == ["note"]


async def test_get_current_time_defaults_to_utc() -> None:
    result = await BUILTINS.execute(call("get_current_time"))
    assert result.status == "completed"
    payload = json.loads(result.content)
    assert payload["timezone"] == "UTC"
    now = datetime.fromisoformat(payload["iso"])
    assert now.utcoffset() == timedelta(0)
    assert abs((datetime.now(now.tzinfo) - now).total_seconds()) < 5


async def test_get_current_time_in_a_timezone() -> None:
    result = await BUILTINS.execute(call("get_current_time", '{"timezone": "Asia/Tokyo"}'))
    payload = json.loads(result.content)
    assert result.status == "completed"
    assert payload["timezone"] == "Asia/Tokyo"
    assert datetime.fromisoformat(payload["iso"]).utcoffset() == timedelta(hours=9)


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "Europe", "../../etc/passwd"])
async def test_get_current_time_unknown_timezone_fails(zone: str) -> None:
    result = await BUILTINS.execute(call("get_current_time", json.dumps({"timezone": zone})))
    error = error_of(result)
    assert "unknown time zone" in error
    assert repr(zone) in error


async def test_get_current_time_rejects_extra_arguments() -> None:
    result = await BUILTINS.execute(call("get_current_time", '{"tz": "UTC"}'))
    assert "invalid arguments" in error_of(result)


async def test_handoff_note() -> None:
    result = await BUILTINS.execute(
        call("handoff_note", '{"note": "call the customer", "recipient": "Ana"}')
    )
    assert result.status == "completed"
    assert json.loads(result.content) == {
        "status": "recorded",
        "note": "call the customer",
        "recipient": "Ana",
    }


async def test_handoff_note_default_recipient() -> None:
    result = await BUILTINS.execute(call("handoff_note", '{"note": "n"}'))
    assert json.loads(result.content)["recipient"] == "the team"


@pytest.mark.parametrize("arguments", ["{}", '{"note": ""}', '{"note": "n", "urgent": true}'])
async def test_handoff_note_invalid_arguments(arguments: str) -> None:
    result = await BUILTINS.execute(call("handoff_note", arguments))
    assert "invalid arguments" in error_of(result)


async def test_search_cards_finds_matching_cards() -> None:
    agent_ = EventAgent(default_registry, ["search_cards"])
    result = await agent_.execute(call("search_cards", '{"query": "pills for tools", "limit": 2}'))
    data = json.loads(result.content)
    assert result.status == "completed"
    assert data["matches"][0]["title"] == "Tool pills"
    assert len(data["matches"]) <= 2
    nothing = await agent_.execute(call("search_cards", '{"query": "zebra"}'))
    assert json.loads(nothing.content)["matches"] == []


async def test_a_failed_call_says_why_in_one_of_the_failure_kinds() -> None:
    def boom(_: dict[str, Any]) -> str:
        raise RuntimeError("disk full")

    async def sleepy(_: dict[str, Any]) -> str:
        await asyncio.sleep(1)
        return "late"

    registry = registry_with("boom", boom, parameters={"type": "object", "required": ["x"]})
    registry.register(ToolDefinition(name="sleepy", description="z"), sleepy, timeout=0.01)
    registry.register(ToolDefinition(name="off", description="not chosen"), boom)
    agent = EventAgent(registry, ["boom", "sleepy"])
    kinds = {
        name: (await agent.execute(call(name, arguments))).failure
        for name, arguments in [
            ("boom", '{"x": 1}'),
            ("boom", "{}"),
            ("nope", "{}"),
            ("off", "{}"),
            ("sleepy", "{}"),
        ]
    }
    assert kinds == {
        "boom": "invalid_arguments",  # the second boom call: no x
        "nope": "unknown_tool",
        "off": "not_enabled",
        "sleepy": "timeout",
    }
    assert (await agent.execute(call("boom", '{"x": 1}'))).failure == "tool_error"
    assert (await agent.execute(call("sleepy", "{}"))).failure == "timeout"
