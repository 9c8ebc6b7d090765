"""The comparison rule and the replay registry, on pure values."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chat import agent
from chat.agent import decisions
from chat.agent.decisions import NO_TOOL, compare, expectation


def got(*calls: tuple[str, Any]) -> dict[str, Any]:
    return decisions.decision(
        agent.ChatMessage(
            role="assistant",
            tool_calls=tuple(
                agent.ToolCall(
                    id=f"c{n}",
                    name=name,
                    arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
                )
                for n, (name, arguments) in enumerate(calls)
            ),
        )
    )


def test_no_tool_expected_passes_only_without_calls() -> None:
    assert compare(NO_TOOL, decisions.decision(None)).passed
    assert compare(
        NO_TOOL, decisions.decision(agent.ChatMessage(role="assistant", content="hi"))
    ).passed
    verdict = compare(NO_TOOL, got(("search_cards", {})))
    assert not verdict.passed
    assert verdict.reason == "expected no tool call, got search_cards"


def test_names_match_as_a_multiset() -> None:
    wanted = expectation([("a", {}), ("b", {}), ("a", {})])
    assert compare(wanted, got(("b", {}), ("a", {}), ("a", {}))).passed
    verdict = compare(wanted, got(("a", {}), ("b", {})))
    assert not verdict.passed
    assert verdict.reason == "expected a x2, b, got a, b"
    assert compare(wanted, got()).reason == "expected a x2, b, got no tool call"


def test_arguments_are_a_subset_with_json_equality() -> None:
    wanted = expectation([("time", {"timezone": "Europe/Paris"})])
    assert compare(wanted, got(("time", {"timezone": "Europe/Paris", "format": "iso"}))).passed
    assert compare(expectation([("time", {"n": 1})]), got(("time", {"n": 1.0}))).passed
    assert not compare(expectation([("time", {"n": True})]), got(("time", {"n": 1}))).passed
    verdict = compare(wanted, got(("time", {"timezone": "UTC"})))
    assert not verdict.passed
    assert 'arguments {"timezone": "UTC"}' in verdict.reason
    assert '{"timezone": "Europe/Paris"}' in verdict.reason
    # An expectation without arguments matches any; nested values are compared whole.
    assert compare(expectation([("time", {})]), got(("time", {"x": [1]}))).passed
    assert not compare(
        expectation([("t", {"x": {"a": 1}})]), got(("t", {"x": {"a": 1, "b": 2}}))
    ).passed


def test_each_expected_call_needs_its_own_match() -> None:
    wanted = expectation([("s", {"q": "a"}), ("s", {})])
    assert compare(wanted, got(("s", {"q": "b"}), ("s", {"q": "a"}))).passed
    assert not compare(
        expectation([("s", {"q": "a"}), ("s", {"q": "a"})]),
        got(("s", {"q": "a"}), ("s", {"q": "b"})),
    ).passed


def test_arguments_that_are_not_an_object_match_nothing() -> None:
    decision = got(("s", "{not json"))
    assert decision["tool_calls"][0]["arguments"] == "{not json"
    verdict = compare(expectation([("s", {})]), decision)
    assert not verdict.passed
    assert "(not a JSON object)" in verdict.reason
    assert got(("s", ""))["tool_calls"][0]["arguments"] == {}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({}, "an expectation is"),
        ({"tool_calls": []}, "non-empty"),
        ({"tool_calls": [{"arguments": {}}]}, "needs a name"),
        ({"tool_calls": [{"name": "s", "arguments": [1]}]}, "must be a JSON object"),
        ({"tool_calls": [{"name": "s", "extra": 1}]}, "only a name and arguments"),
        ({"no_tool": True, "tool_calls": []}, "an expectation is"),
    ],
)
def test_check_expectation_says_what_is_wrong(value: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        decisions.check_expectation(value)


def test_summary_reads_in_one_line() -> None:
    assert decisions.summary(NO_TOOL) == "no tool"
    assert decisions.summary(expectation([("s", {"q": "x"})])) == 's({"q": "x"})'


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_cards",
            "description": "Search.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    },
    {"type": "web_search"},
]


async def test_the_replay_registry_answers_from_fixtures_and_never_runs_a_tool() -> None:
    fixtures = [{"name": "search_cards", "arguments": {"query": "pills"}, "content": "FOUND"}]
    registry = decisions.replay_registry(TOOLS, fixtures)
    assert registry.names() == ["search_cards"]
    events = agent.EventAgent(registry, ["search_cards"])
    found = await events.execute(
        agent.ToolCall(id="1", name="search_cards", arguments='{ "query" : "pills" }')
    )
    assert (found.status, found.content) == ("completed", "FOUND")
    missing = await events.execute(
        agent.ToolCall(id="2", name="search_cards", arguments='{"query": "other"}')
    )
    assert missing.status == "failed"
    assert "no recorded result for search_cards" in json.loads(missing.content)["error"]
    invalid = await events.execute(agent.ToolCall(id="3", name="search_cards", arguments="{}"))
    assert invalid.failure == "invalid_arguments"


async def test_without_fixtures_each_call_is_answered_not_run() -> None:
    registry = decisions.replay_registry(TOOLS, None)
    result = await agent.EventAgent(registry, ["search_cards"]).execute(
        agent.ToolCall(id="1", name="search_cards", arguments='{"query": "x"}')
    )
    assert result.content == decisions.NOT_RUN
