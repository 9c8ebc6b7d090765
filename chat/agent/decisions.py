"""Tool decisions: what a model turn decided to call, what a case expected, and whether the two
agree; and the registry that answers a replay's tool calls from recorded results.

An expectation is `{"no_tool": true}` or `{"tool_calls": [{"name": ..., "arguments": {...}}]}`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from .messages import ChatMessage
from .tools import ToolDefinition, ToolError, ToolRegistry

RULE = (
    "A case passes when the model's tool decision matches the expectation: with “no tool”, it "
    "called none; otherwise the names of the tools it called equal the expected names as a "
    "multiset (order does not matter, each call counts), and each expected call is matched by "
    "its own call of that name whose arguments are a JSON object holding every expected key "
    "with an equal JSON value (further keys are allowed; an expectation with no arguments "
    "matches any)."
)
"""The comparison rule, as the commands and the Evaluations page print it."""

NO_TOOL: dict[str, Any] = {"no_tool": True}
NOT_RUN = "Not run: the evaluation compares the model's tool decision and stops there."


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str = ""


def expectation(calls: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The expectation of these (name, arguments) calls; none is "no tool"."""
    listed = [{"name": name, "arguments": dict(arguments)} for name, arguments in calls]
    return {"tool_calls": listed} if listed else dict(NO_TOOL)


def decision(message: ChatMessage | None) -> dict[str, Any]:
    """What a model turn decided, in the expectation's shape; arguments that are not a JSON
    object are kept as the raw text the model sent (they then match nothing)."""
    if message is None or not message.tool_calls:
        return dict(NO_TOOL)
    calls = []
    for call in message.tool_calls:
        arguments = parse_arguments(call.arguments)
        calls.append(
            {"name": call.name, "arguments": call.arguments if arguments is None else arguments}
        )
    return {"tool_calls": calls}


def parse_arguments(text: str) -> dict[str, Any] | None:
    """Raw `arguments` as a JSON object (empty text is `{}`); None when they are not one."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def check_expectation(value: Any) -> dict[str, Any]:
    """A valid expectation, or ValueError with one line saying what is wrong."""
    if value == NO_TOOL:
        return dict(NO_TOOL)
    if not isinstance(value, dict) or set(value) != {"tool_calls"}:
        raise ValueError(
            'an expectation is {"no_tool": true} or {"tool_calls": [{"name": ..., "arguments": '
            "{...}}, ...]}"
        )
    calls = value["tool_calls"]
    if not isinstance(calls, list) or not calls:
        raise ValueError("expected tool_calls must be a non-empty list (or use no_tool)")
    checked = []
    for number, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ValueError(f"expected tool_calls[{number}] needs a name")
        if not call["name"].strip() or set(call) - {"name", "arguments"}:
            raise ValueError(f"expected tool_calls[{number}] holds only a name and arguments")
        arguments = call.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ValueError(f"expected tool_calls[{number}].arguments must be a JSON object")
        checked.append({"name": call["name"], "arguments": arguments})
    return {"tool_calls": checked}


def compare(expected: Mapping[str, Any], got: Mapping[str, Any]) -> Verdict:
    """Whether `got` (a `decision`) meets `expected`, with the reason when it does not (RULE)."""
    got_calls: list[dict[str, Any]] = list(got.get("tool_calls") or [])
    if expected.get("no_tool"):
        if got_calls:
            return Verdict(False, f"expected no tool call, got {names_text(got_calls)}")
        return Verdict(True)
    wanted: list[dict[str, Any]] = list(expected.get("tool_calls") or [])
    if not got_calls:
        return Verdict(False, f"expected {names_text(wanted)}, got no tool call")
    if Counter(c["name"] for c in wanted) != Counter(c["name"] for c in got_calls):
        return Verdict(False, f"expected {names_text(wanted)}, got {names_text(got_calls)}")
    for name in dict.fromkeys(c["name"] for c in wanted):
        mine = [c["arguments"] for c in wanted if c["name"] == name]
        theirs = [c["arguments"] for c in got_calls if c["name"] == name]
        if not _matched(mine, theirs):
            shown = "; ".join(_text(a) for a in theirs)
            return Verdict(
                False,
                f"{name}: arguments {shown} do not hold the expected "
                + "; ".join(_text(a) for a in mine),
            )
    return Verdict(True)


def _matched(wanted: Sequence[Mapping[str, Any]], got: Sequence[Any]) -> bool:
    """Each wanted argument set meets its own call among `got` (a small backtracking search:
    a turn holds a handful of calls)."""
    if not wanted:
        return True
    first, rest = wanted[0], wanted[1:]
    for position, candidate in enumerate(got):
        if _holds(first, candidate) and _matched(rest, [*got[:position], *got[position + 1 :]]):
            return True
    return False


def _holds(wanted: Mapping[str, Any], got: Any) -> bool:
    if not isinstance(got, dict):
        return False
    return all(key in got and _equal(got[key], value) for key, value in wanted.items())


def _equal(one: Any, other: Any) -> bool:
    """JSON equality: 1 equals 1.0, but true is not 1."""
    if isinstance(one, bool) or isinstance(other, bool):
        return type(one) is type(other) and one == other
    if isinstance(one, dict) and isinstance(other, dict):
        return one.keys() == other.keys() and all(_equal(one[k], other[k]) for k in one)
    if isinstance(one, list) and isinstance(other, list):
        return len(one) == len(other) and all(_equal(a, b) for a, b in zip(one, other, strict=True))
    return bool(one == other)


def _text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return f"{arguments!r} (not a JSON object)"
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True)


def names_text(calls: Sequence[Mapping[str, Any]]) -> str:
    """`search_cards, get_current_time x2` for a list of calls."""
    counts = Counter(str(c.get("name", "")) for c in calls)
    return ", ".join(name if n == 1 else f"{name} x{n}" for name, n in counts.items())


def summary(value: Mapping[str, Any]) -> str:
    """A decision or an expectation on one line: `no tool`, or each call with its arguments."""
    if value.get("no_tool") or not value.get("tool_calls"):
        return "no tool"
    return ", ".join(
        f"{call['name']}({_text(call.get('arguments', {}))})" for call in value["tool_calls"]
    )


def fixture_key(name: str, arguments: Any) -> str:
    """How a recorded result is found again: the tool's name and its arguments as canonical
    JSON (so key order and spacing do not matter)."""
    if isinstance(arguments, str):
        parsed = parse_arguments(arguments)
        arguments = arguments.strip() if parsed is None else parsed
    return name + "\x00" + json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def replay_registry(
    tools: Sequence[Mapping[str, Any]],
    fixtures: Sequence[Mapping[str, Any]] | None,
) -> ToolRegistry:
    """The tools a case offered (OpenAI `tools` entries), answering from recorded results.

    With `fixtures=None` nothing is answered from them: each call gets NOT_RUN (an evaluation
    that stops at the decision). Otherwise a call is answered with the content recorded for the
    same tool and equal arguments; one with no recorded result fails with a JSON error reply
    saying so. No tool is ever executed.
    """
    recorded = {
        fixture_key(str(f["name"]), f.get("arguments", {})): str(f.get("content", ""))
        for f in fixtures or ()
    }
    registry = ToolRegistry()
    for entry in tools:
        definition = tool_definition(entry)
        if definition is None or definition.name in registry:
            continue
        handler = _answer(definition.name, recorded, fixtures is not None)
        try:
            registry.register(definition, handler)
        except jsonschema.SchemaError:
            # The provider took it; its arguments are then checked as any object.
            loose = definition.model_copy(update={"parameters": {"type": "object"}})
            registry.register(loose, handler)
    return registry


def _answer(name: str, recorded: Mapping[str, str], from_fixtures: bool) -> Any:
    async def handler(arguments: dict[str, Any]) -> str:
        if not from_fixtures:
            return NOT_RUN
        found = recorded.get(fixture_key(name, arguments))
        if found is None:
            raise ToolError(
                f"no recorded result for {name} with these arguments in the case's fixtures: "
                "the replay never runs a tool"
            )
        return found

    return handler


def tool_definition(entry: Mapping[str, Any]) -> ToolDefinition | None:
    """An OpenAI `tools` entry as a definition; None for anything that is not a function."""
    function = entry.get("function") if entry.get("type", "function") == "function" else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return None
    parameters = function.get("parameters")
    try:
        return ToolDefinition(
            name=function["name"],
            description=str(function.get("description") or ""),
            parameters=parameters
            if isinstance(parameters, dict)
            else {"type": "object", "properties": {}},
        )
    except ValueError:
        return None
