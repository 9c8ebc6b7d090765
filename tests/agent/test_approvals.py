"""The approval round in the agent core (no Django): an *ask* call makes its round wait before
anything runs, a *never* call is refused without asking, a resumed round runs the approved
calls and the ones that needed no approval, and a denial is the reply the model reads."""

from __future__ import annotations

import json

from chat.agent import approvals, history
from chat.agent.contracts import AgentParameters, DebugRunRequest
from chat.agent.events import ApprovalRequested, RunFinished, ToolCallFinished, ToolCallStarted
from chat.agent.messages import ToolCall
from chat.agent.runtime import DebugRuntime, Resume
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.agent.tools import ToolDefinition, ToolRegistry


def registry(ran: list[str]) -> ToolRegistry:
    """`look` only reads (runs without asking), `write` changes something (asks), `files__rm`
    lives on an MCP server (asks); each records that it ran."""
    tools = ToolRegistry()
    for name, read_only, source in [
        ("look", True, ""),
        ("write", False, ""),
        ("files__rm", False, "files"),
    ]:

        def handler(arguments: dict[str, object], name: str = name) -> str:
            ran.append(name)
            return f"{name} done"

        tools.register(
            ToolDefinition(name=name, description=name), handler, read_only=read_only, source=source
        )
    return tools


def call(id: str, name: str) -> ToolCall:
    return ToolCall(id=id, name=name, arguments=json.dumps({}))


TURN = ScriptedTurn(tool_calls=(call("a", "look"), call("b", "write"), call("c", "files__rm")))


def request(**policies: str) -> DebugRunRequest:
    parameters = AgentParameters.model_validate(
        {"enabled_tools": ["look", "write", "files__rm"], "tool_policies": policies},
        context={"registry": registry([])},
    )
    return DebugRunRequest(parameters=parameters, user_message="tidy up")


async def test_a_round_with_an_ask_call_waits_before_anything_runs() -> None:
    ran: list[str] = []
    runtime = DebugRuntime(client=ScriptedChatClient([TURN]), registry=registry(ran))

    events = [event async for event in runtime.run(request())]

    (asked,) = [e for e in events if isinstance(e, ApprovalRequested)]
    assert [c.id for c in asked.tool_calls] == ["b", "c"]
    assert asked.sources == ("", "files")
    assert not [e for e in events if isinstance(e, ToolCallStarted)]
    assert ran == []  # not even the read-only call: the round runs once it is decided
    assert isinstance(events[-1], RunFinished) and events[-1].status == "requires_action"
    assert [c.id for c in runtime.waiting] == ["b", "c"]


async def test_never_is_refused_without_asking_and_run_overrides_the_default() -> None:
    ran: list[str] = []
    client = ScriptedChatClient([TURN, "Done."])
    runtime = DebugRuntime(client=client, registry=registry(ran))

    events = [e async for e in runtime.run(request(write="run", files__rm="never"))]

    assert not [e for e in events if isinstance(e, ApprovalRequested)]
    assert sorted(ran) == ["look", "write"]
    results = {e.result.tool_call.id: e.result for e in events if isinstance(e, ToolCallFinished)}
    assert (results["c"].failure, results["c"].policy) == ("not_allowed", "never")
    assert results["c"].content == f"{approvals.NOT_ALLOWED}."
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
    assert history.validate(runtime.messages) == []


async def test_a_resumed_round_runs_the_approved_and_the_free_calls_and_denies_the_rest() -> None:
    ran: list[str] = []
    first = DebugRuntime(client=ScriptedChatClient([TURN]), registry=registry(ran))
    [e async for e in first.run(request())]
    stored = first.messages  # the history as the database keeps it: ends with the calls

    again = DebugRuntime(client=ScriptedChatClient(["Tidied."]), registry=registry(ran))
    denied = approvals.denial(call("c", "files__rm"), "keep the files")
    resumed = DebugRunRequest.model_validate(
        {"parameters": request().parameters, "history": stored, "user_message": None},
        context={"resuming": True},
    )
    point = Resume(step=1, answered={"c": denied}, approved=frozenset({"b"}))
    events = [e async for e in again.run(resumed, resume=point)]

    assert sorted(ran) == ["look", "write"]
    replies = {m.tool_call_id: m.content for m in again.messages if m.role == "tool"}
    assert replies["c"] == "The user denied this call: keep the files"
    assert [m.tool_call_id for m in again.messages if m.role == "tool"] == ["a", "b", "c"]
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
    assert history.validate(again.messages) == []


async def test_without_approvals_nothing_waits_and_nothing_is_refused() -> None:
    ran: list[str] = []
    client = ScriptedChatClient([TURN, "Done."])
    runtime = DebugRuntime(client=client, registry=registry(ran), approvals=False)

    events = [e async for e in runtime.run(request(files__rm="never"))]

    assert sorted(ran) == ["files__rm", "look", "write"]
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
