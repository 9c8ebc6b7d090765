"""The most tools a request may carry (OpenAI's 128): a run offering more is refused before any
request, with the count per source; the strict fake provider refuses such a request as OpenAI
does. And what the model reads when it calls a tool the request did not offer."""

from __future__ import annotations

import json

import httpx

from chat.agent.contracts import AgentParameters, DebugRunRequest
from chat.agent.events import RunFinished, StepStarted
from chat.agent.messages import ToolCall
from chat.agent.offer import MAX_TOOLS, too_many_tools
from chat.agent.runtime import DebugRuntime
from chat.agent.tools import EventAgent, ToolDefinition, ToolRegistry, default_registry
from chat.testing.openai_script import MODEL, text_turn
from chat.testing.openai_server import FakeOpenAIServer, client_for


def registry_of(**counts: int) -> ToolRegistry:
    """The built-in tools, and `count` small tools of each named MCP server."""
    registry = default_registry.copy()
    for source, count in counts.items():
        for number in range(1, count + 1):
            definition = ToolDefinition(name=f"{source}__tool_{number:03d}", description="Small.")
            registry.register(definition, lambda _: "ok", source=source)
    return registry


def request_for(registry: ToolRegistry, enabled: list[str]) -> DebugRunRequest:
    parameters = AgentParameters.model_validate(
        {"enabled_tools": enabled}, context={"registry": registry}
    )
    return DebugRunRequest(parameters=parameters, user_message="Which tool fits?")


def test_the_count_is_given_per_source_built_in_last() -> None:
    sources = ["filler"] * 109 + ["docs"] * 20 + [""] * 4

    assert too_many_tools(sources) == (
        "This run offers 133 tools; the most a request may carry is 128. "
        "By source: docs (20), filler (109), built-in (4). Turn some off in the settings."
    )
    assert too_many_tools(sources[:MAX_TOOLS]) is None


async def test_a_run_offering_too_many_tools_is_refused_before_any_request() -> None:
    registry = registry_of(docs=20, filler=109)
    enabled = registry.names()
    with FakeOpenAIServer() as fake:
        fake.enqueue(text_turn("never sent"))
        runtime = DebugRuntime(client=client_for(fake.base_url), registry=registry)

        events = [event async for event in runtime.run(request_for(registry, enabled))]

        assert fake.requests == []
    built_in = len(default_registry.built_in_names())
    assert events == [
        RunFinished(
            status="failed",
            error=f"This run offers {129 + built_in} tools; the most a request may carry is "
            f"128. By source: docs (20), filler (109), built-in ({built_in}). "
            "Turn some off in the settings.",
        )
    ]


async def test_only_offered_tools_count_toward_the_limit() -> None:
    registry = registry_of(docs=MAX_TOOLS)
    registry.withhold("docs__down", "MCP server docs is unavailable: refused", source="docs")
    with FakeOpenAIServer() as fake:
        fake.enqueue(text_turn("One fits."))
        runtime = DebugRuntime(client=client_for(fake.base_url), registry=registry)
        chosen = [name for name in registry.names() if name.startswith("docs__")]
        chosen.append("docs__down")

        events = [event async for event in runtime.run(request_for(registry, chosen))]

        assert isinstance(events[0], StepStarted)
        assert isinstance(events[-1], RunFinished) and events[-1].status == "completed"
        assert len(fake.requests[0].body["tools"]) == MAX_TOOLS


def test_the_strict_fake_provider_refuses_more_tools_as_openai_does() -> None:
    tool = {"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with FakeOpenAIServer() as fake:
        fake.enqueue(text_turn("fits"))
        url = f"{fake.base_url}/chat/completions"

        refused = httpx.post(url, json={**body, "tools": [tool] * 133})
        accepted = httpx.post(url, json={**body, "tools": [tool] * MAX_TOOLS})

    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        "Invalid 'tools': array too long. Expected an array with maximum length 128, "
        "but got an array with length 133 instead."
    )
    assert accepted.status_code == 200


# --- a call to a tool the request did not offer ------------------------------------------


async def error_of(registry: ToolRegistry, enabled: list[str], name: str) -> str:
    call = ToolCall(id="call_1", name=name, arguments="{}")
    result = await EventAgent(registry, enabled).execute(call)
    assert result.status == "failed"
    return str(json.loads(result.content)["error"])


async def test_up_to_twenty_offered_tools_are_named() -> None:
    registry = registry_of(docs=30)
    enabled = [f"docs__tool_{number:03d}" for number in (3, 1, 2)] + ["docs__gone", "ghost"]

    assert await error_of(registry, enabled, "docs__tool_004") == (
        "tool 'docs__tool_004' is not available "
        "(offered: docs__tool_001, docs__tool_002, docs__tool_003)"
    )


async def test_past_twenty_the_count_and_the_three_closest_names() -> None:
    registry = registry_of(docs=25)
    registry.register(ToolDefinition(name="search_cards", description="S."), lambda _: "ok")
    registry.register(ToolDefinition(name="search_docs", description="S."), lambda _: "ok")
    registry.register(ToolDefinition(name="search_code", description="S."), lambda _: "ok")
    enabled = [*(f"docs__tool_{n:03d}" for n in range(1, 26)), "search_cards", "search_docs"]
    enabled += ["search_code", "not_chosen_here"]

    error = await error_of(registry, enabled, "search_doc")

    assert error == (
        "tool 'search_doc' is not available "
        "(28 tools offered; closest: search_docs, search_code, search_cards)"
    )
