from __future__ import annotations

import json
import re
from typing import Any

import pytest

from chat.agent.clients import OpenAICompatibleChatClient
from chat.agent.contracts import AgentParameters
from chat.agent.messages import ChatMessage, ToolCall
from chat.agent.tools import default_registry
from chat.agent.wire import WireFormat, alnum9, build_request_body, offered_tools
from chat.testing.openai_script import text_turn
from chat.testing.openai_server import FakeOpenAIServer

ALNUM9 = re.compile(r"^[a-zA-Z0-9]{9}$")
CLOCK = default_registry.definitions(["get_current_time"])


def history() -> list[ChatMessage]:
    return [
        ChatMessage(role="user", content="time?"),
        ChatMessage(
            role="assistant",
            reasoning="I should call the clock.",
            tool_calls=(ToolCall(id="call_8f2e1a0b", name="get_current_time", arguments="{}"),),
        ),
        ChatMessage(role="tool", tool_call_id="call_8f2e1a0b", content='{"iso": "noon"}'),
    ]


def test_alnum9_is_stable_and_well_formed() -> None:
    assert alnum9("call_1") == alnum9("call_1")
    assert alnum9("call_1") != alnum9("call_2")
    assert ALNUM9.match(alnum9("call_1"))
    assert WireFormat(tool_call_ids="alnum9").tool_call_id("Ab3dE6gH9") == "Ab3dE6gH9"


def test_reasoning_goes_back_only_after_the_last_user_message() -> None:
    earlier = [
        ChatMessage(role="user", content="a"),
        ChatMessage(role="assistant", content="b", reasoning="old thoughts"),
    ]
    wire = WireFormat(reasoning_field="reasoning_content").messages([*earlier, *history()])
    assert "reasoning_content" not in wire[1]
    assert wire[3]["reasoning_content"] == "I should call the clock."
    assert "reasoning_content" not in WireFormat().messages(history())[1]


def mistral(body: Any) -> str | None:
    for message in body["messages"]:
        ids = [c["id"] for c in message.get("tool_calls", [])]
        ids += [message["tool_call_id"]] if "tool_call_id" in message else []
        for call_id in ids:
            if not ALNUM9.match(call_id):
                return f"Tool call id was {call_id} but must be a-z, A-Z, 0-9, with a length of 9."
    return None


def deepseek(body: Any) -> str | None:
    for message in body["messages"]:
        if message.get("tool_calls") and "reasoning_content" not in message:
            return "Missing `reasoning_content` field in the assistant message"
    return None


def no_parallel(body: Any) -> str | None:
    if "parallel_tool_calls" in body:
        return "Unrecognized request argument supplied: parallel_tool_calls"
    return None


@pytest.mark.parametrize(
    ("check", "wire"),
    [
        (mistral, WireFormat(tool_call_ids="alnum9")),
        (deepseek, WireFormat(reasoning_field="reasoning_content")),
        (no_parallel, WireFormat(parallel_tool_calls=False)),
        (lambda body: None, WireFormat(empty_content="omit")),
    ],
)
async def test_each_quirk_gives_the_wire_format_a_picky_server_accepts(
    fake_openai: FakeOpenAIServer, check: Any, wire: WireFormat
) -> None:
    fake_openai.checks.append(check)
    fake_openai.enqueue(text_turn("ok"), text_turn("ok"))
    async with (
        OpenAICompatibleChatClient(
            base_url=fake_openai.base_url, model="m", backoff=0, max_retries=0
        ) as plain,
        OpenAICompatibleChatClient(
            base_url=fake_openai.base_url, model="m", backoff=0, max_retries=0, wire=wire
        ) as tuned,
    ):
        accepted = [item async for item in tuned.stream(history(), tools=CLOCK)]
        assert accepted[-1].message.content == "ok"  # type: ignore[union-attr]
        if check(json.loads(fake_openai.requests[-1].raw)) is None and wire.empty_content == "omit":
            assert "content" not in fake_openai.requests[-1].body["messages"][1]
            return
        with pytest.raises(Exception, match="HTTP 400"):
            [item async for item in plain.stream(history(), tools=CLOCK)]


def test_offered_tools_reads_the_function_names_back_from_a_body() -> None:
    tools = default_registry.definitions(["get_current_time", "handoff_note"])
    body = build_request_body(history(), model="m", tools=tools, parameters=AgentParameters())
    assert offered_tools(body) == ["get_current_time", "handoff_note"]
    no_tools = build_request_body(history(), model="m", tools=(), parameters=AgentParameters())
    assert offered_tools(no_tools) == []
    odd = {"tools": [{"type": "function"}, "x", {"function": {"name": 3}}, *body["tools"] * 2]}
    assert offered_tools(odd) == ["get_current_time", "handoff_note"]
    assert offered_tools([]) == [] and offered_tools({"tools": "x"}) == []
