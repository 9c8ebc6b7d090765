from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from chat import agent, runs
from chat.agent import events, history
from chat.agent.clients import OpenAICompatibleChatClient
from chat.models import Conversation, ModelCall, Run, ToolCall
from chat.testing import factories as make
from chat.testing.openai_script import ScriptedResponse, chunk, error, sse, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer, client_for
from chat.testing.processes import ROOT, free_port

pytestmark = pytest.mark.django_db(transaction=True)

API_KEY = "sk-fault-canary"
TEXT = "Hello there, partial world"
PARTIAL = "Hello th"  # the role chunk and two 4-character pieces of TEXT
NEXT_REPLY = "Back on track."


FAIL_FAST = {"max_retries": 1, "max_retry_wait": 0.2, "read_timeout": 0.5, "connect_timeout": 0.5}


def make_client(base_url: str) -> OpenAICompatibleChatClient:
    return client_for(base_url, api_key=API_KEY, model="m", **FAIL_FAST)


class Seen(list[events.RunEvent]):
    """A listener keeping every event a run tells its listeners."""

    def __init__(self) -> None:
        super().__init__()
        self._told = asyncio.Event()

    async def __call__(self, run: Run, event: events.RunEvent) -> None:
        self.append(event)
        self._told.set()

    async def first(self, kind: type[events.RunEvent]) -> None:
        async with asyncio.timeout(5):
            while not any(isinstance(event, kind) for event in self):
                self._told.clear()
                await self._told.wait()


async def start(
    conversation: Conversation, content: str, base_url: str, seen: Seen
) -> runs.RunHandle:
    return await make.start_as_owner(conversation, content, make_client(base_url), [seen])


async def run_once(
    conversation: Conversation,
    content: str,
    base_url: str,
    seen: Seen | None = None,
) -> Run:
    handle = await start(conversation, content, base_url, Seen() if seen is None else seen)
    async with asyncio.timeout(10):
        run = await handle.task
    await run.arefresh_from_db()
    return run


async def model_calls(run: Run) -> list[ModelCall]:
    return [call async for call in ModelCall.objects.filter(run=run).order_by("step", "id")]


async def tool_calls(run: Run) -> list[ToolCall]:
    return [call async for call in ToolCall.objects.filter(run=run)]


async def assert_next_message_works(
    fake_openai: FakeOpenAIServer, conversation: Conversation
) -> dict[str, Any]:
    """A new message in the same conversation completes against the strict server."""
    before = len(fake_openai.requests)
    fake_openai.enqueue(text_turn(NEXT_REPLY))

    run = await run_once(conversation, "and now?", fake_openai.base_url)

    assert (run.status, run.error) == ("completed", "")
    assert len(fake_openai.requests) == before + 1
    messages = await make.ahistory(conversation)
    assert (messages[-1].role, messages[-1].content) == ("assistant", NEXT_REPLY)
    assert history.validate(messages) == []
    body: dict[str, Any] = fake_openai.requests[-1].body
    assert body["messages"][-1] == {"role": "user", "content": "and now?"}
    return body


async def assert_no_key_anywhere(run: Run, seen: Seen) -> None:
    assert API_KEY not in run.error
    for model_call in await model_calls(run):
        assert API_KEY not in model_call.error
        assert API_KEY not in json.dumps(model_call.request)
    for message in await make.ahistory(await Conversation.objects.aget(pk=run.conversation_id)):
        assert API_KEY not in message.model_dump_json()
    assert all(API_KEY not in repr(event) for event in seen)


@dataclass(frozen=True)
class ProviderFault:
    responses: tuple[ScriptedResponse, ...]
    error: str
    requests: int
    http_status: int | None
    attempts: int = 1
    status: str = "failed"
    partial: str | None = None
    finish_reason: str = ""
    refused: bool = False


PROVIDER_FAULTS = {
    "http-500-retried-once": ProviderFault(
        responses=(error(500, "upstream exploded"), error(500, "upstream exploded")),
        error="HTTP 500: upstream exploded",
        requests=2,
        http_status=500,
        attempts=2,
    ),
    "429-retry-after-0-then-success": ProviderFault(
        responses=(error(429, "slow down", headers={"Retry-After": "0"}), text_turn(TEXT)),
        error="",
        requests=2,
        http_status=200,
        attempts=2,
        status="completed",
        partial=TEXT,
        finish_reason="stop",
    ),
    "429-twice-gives-up": ProviderFault(
        responses=(error(429, "Rate limit reached"), error(429, "Rate limit reached")),
        error="HTTP 429: Rate limit reached",
        requests=2,
        http_status=429,
        attempts=2,
    ),
    "401-echoing-the-key": ProviderFault(
        responses=(error(401, f"Incorrect API key provided: {API_KEY}"),),
        error="HTTP 401: Incorrect API key provided: [REDACTED]",
        requests=1,
        http_status=401,
    ),
    "connection-refused": ProviderFault(
        responses=(),
        error="could not connect to {base_url}: ",
        requests=0,
        http_status=None,
        attempts=2,
        refused=True,
    ),
    "no-first-byte-before-read-timeout": ProviderFault(
        responses=(text_turn(TEXT).but(delay=2),),
        error="no response within 0.5s (read timeout)",
        requests=1,
        http_status=None,
    ),
    "stall-mid-stream": ProviderFault(
        responses=(text_turn(TEXT).but(stall=(3, 2)),),
        error="the stream stalled: no data within 0.5s (read timeout) after 8 characters",
        requests=1,
        http_status=200,
        partial=PARTIAL,
    ),
    "connection-dropped-mid-stream": ProviderFault(
        responses=(text_turn(TEXT).but(cut_after=3),),
        error="the connection dropped mid-stream after 8 characters",
        requests=1,
        http_status=200,
        partial=PARTIAL,
    ),
    "malformed-chunk": ProviderFault(
        responses=(
            sse(
                chunk({"role": "assistant", "content": ""}),
                chunk({"content": "Hello"}),
                chunk({"content": " th"}),
                "data: {not json",
                chunk({"content": "ere"}),
                chunk({}, finish_reason="stop"),
            ),
        ),
        error="malformed stream chunk: unparseable data: {not json",
        requests=1,
        http_status=200,
        partial=PARTIAL,
    ),
    "finish-reason-length": ProviderFault(
        responses=(text_turn(TEXT, finish_reason="length"),),
        error="The reply was cut off: the model reached its token limit (finish_reason: length).",
        requests=1,
        http_status=200,
        partial=TEXT,
        finish_reason="length",
    ),
    "empty-reply": ProviderFault(
        responses=(text_turn(""),),
        error="The model returned an empty reply.",
        requests=1,
        http_status=200,
        finish_reason="stop",
    ),
}


@pytest.mark.parametrize("fault", PROVIDER_FAULTS.values(), ids=list(PROVIDER_FAULTS))
async def test_provider_fault_is_reported_keeps_history_valid_and_the_next_message_works(
    fake_openai: FakeOpenAIServer, fault: ProviderFault, caplog: pytest.LogCaptureFixture
) -> None:
    conversation = await make.aconversation()
    fake_openai.enqueue(*fault.responses)
    base_url = f"http://127.0.0.1:{free_port()}/v1" if fault.refused else fake_openai.base_url
    seen = Seen()
    started = time.monotonic()

    run = await run_once(conversation, "go", base_url, seen)

    assert time.monotonic() - started < 2
    assert run.status == fault.status
    expected_error = fault.error.replace("{base_url}", base_url)
    if fault.refused:
        assert run.error.startswith(expected_error) and len(run.error) > len(expected_error)
    else:
        assert run.error == expected_error
    assert len(fake_openai.requests) == fault.requests
    assert all(r.headers["authorization"] == f"Bearer {API_KEY}" for r in fake_openai.requests)

    messages = await make.ahistory(conversation)
    assert history.validate(messages) == []
    if fault.partial is not None:
        assert [(m.role, m.content) for m in messages] == [
            ("user", "go"),
            ("assistant", fault.partial),
        ]
    elif fault.finish_reason:  # the turn finished, with nothing in it
        assert [(m.role, m.content) for m in messages] == [("user", "go"), ("assistant", None)]
    else:  # nothing streamed: nothing is invented
        assert [(m.role, m.content) for m in messages] == [("user", "go")]

    (model_call,) = await model_calls(run)
    assert (model_call.http_status, model_call.attempts) == (fault.http_status, fault.attempts)
    assert model_call.finish_reason == fault.finish_reason
    if fault.finish_reason:
        assert model_call.error == ""
    else:
        assert model_call.error == run.error
    assert model_call.request["messages"] == [{"role": "user", "content": "go"}]
    finished = [event for event in seen if isinstance(event, events.RunFinished)]
    assert [(event.status, event.error or "") for event in finished] == [(run.status, run.error)]

    body = await assert_next_message_works(fake_openai, conversation)
    sent_back = [(m["role"], m["content"]) for m in body["messages"]]
    assert sent_back[: len(messages)] == [(m.role, m.content or "") for m in messages]
    await assert_no_key_anywhere(run, seen)
    assert API_KEY not in caplog.text


async def test_the_app_retries_a_500_twice_with_backoff_as_the_readme_says(
    fake_openai: FakeOpenAIServer, settings: Any
) -> None:
    settings.OPENAI_BASE_URL = fake_openai.base_url
    settings.AGENTLAB_MODEL = "m"
    conversation = await make.aconversation()
    fake_openai.enqueue(*[error(500, "upstream exploded")] * 3)
    started = time.monotonic()

    handle = await make.start_as_owner(conversation, "go")  # the client the app builds
    async with asyncio.timeout(10):
        run = await handle.task

    assert (run.status, run.error) == ("failed", "HTTP 500: upstream exploded")
    assert len(fake_openai.requests) == 3
    assert [call.attempts for call in await model_calls(run)] == [3]
    assert time.monotonic() - started >= 0.5 + 1.0
    readme = (ROOT / "README.md").read_text()
    (row,) = [line for line in readme.splitlines() if line.startswith("| HTTP 500 ")]
    assert "retried twice (after 0.5 s, then 1 s)" in row
    await assert_next_message_works(fake_openai, conversation)


async def test_final_answer_after_several_tool_rounds_is_stored(
    fake_openai: FakeOpenAIServer,
) -> None:
    conversation = await make.aconversation(enabled_tools=["get_current_time"])
    for round_ in range(3):
        fake_openai.enqueue(tool_turn([(f"call_{round_}", "get_current_time", "{}")]))
    fake_openai.enqueue(text_turn("Final answer after three rounds."))

    run = await run_once(conversation, "go", fake_openai.base_url)

    assert (run.status, run.error, run.steps) == ("completed", "", 4)
    messages = await make.ahistory(conversation)
    assert [m.role for m in messages] == ["user", *["assistant", "tool"] * 3, "assistant"]
    assert messages[-1].content == "Final answer after three rounds."
    assert history.validate(messages) == []
    assert [c.finish_reason for c in await model_calls(run)] == [*["tool_calls"] * 3, "stop"]
    assert [c.status for c in await tool_calls(run)] == ["completed"] * 3
    assert len(fake_openai.requests) == 4
    body = await assert_next_message_works(fake_openai, conversation)
    assert body["messages"][-2] == {
        "role": "assistant",
        "content": "Final answer after three rounds.",
    }


async def test_tool_call_ids_reused_across_turns_keep_history_valid(
    fake_openai: FakeOpenAIServer,
) -> None:
    conversation = await make.aconversation(enabled_tools=["get_current_time"])
    for answer in ("one", "two"):
        fake_openai.enqueue(tool_turn([("call_0", "get_current_time", "{}")]), text_turn(answer))
        run = await run_once(conversation, "what time is it?", fake_openai.base_url)
        assert run.status == "completed"

    assert history.validate(await make.ahistory(conversation)) == []


@pytest.fixture
def fault_tools() -> Iterator[None]:
    """Temporary tools that fail in the ways real tools do (they only read: they run without
    asking)."""

    def fault_raiser(arguments: dict[str, Any]) -> str:
        raise RuntimeError("disk on fire")

    async def fault_sleeper(arguments: dict[str, Any]) -> str:
        await asyncio.sleep(5)
        return "too late"

    def fault_huge(arguments: dict[str, Any]) -> str:
        return HUGE

    registry = agent.default_registry
    handlers = {"fault_raiser": fault_raiser, "fault_sleeper": fault_sleeper}
    try:
        for name, handler in handlers.items():
            definition = agent.ToolDefinition(name=name, description=name)
            registry.register(definition, handler, timeout=0.2, read_only=True)
        registry.register(
            agent.ToolDefinition(name="fault_huge", description="big"), fault_huge, read_only=True
        )
        yield
    finally:
        for name in [*handlers, "fault_huge"]:
            registry.unregister(name)


HUGE = "0123456789abcdé\n" * 65_536  # 1,048,576 characters

OFFERED = "offered: fault_raiser, fault_sleeper, get_current_time"
TOOL_FAULTS = [
    pytest.param("get_current_time", "{oops", "invalid arguments: not valid JSON: ", id="not-json"),
    pytest.param(
        "delete_everything",
        "{}",
        f"tool 'delete_everything' is not available ({OFFERED})",
        id="tool-not-offered",
    ),
    pytest.param(
        "",
        "{}",
        f"tool 'unnamed_tool' is not available ({OFFERED})",
        id="tool-name-empty",
    ),
    pytest.param("fault_raiser", "{}", "RuntimeError: disk on fire", id="tool-raises"),
    pytest.param(
        "fault_sleeper", "{}", "tool 'fault_sleeper' timed out after 0.2s", id="tool-times-out"
    ),
]


@pytest.mark.usefixtures("fault_tools")
@pytest.mark.parametrize(("name", "arguments", "expected"), TOOL_FAULTS)
async def test_tool_fault_is_a_result_the_model_sees_and_the_run_completes(
    fake_openai: FakeOpenAIServer, name: str, arguments: str, expected: str
) -> None:
    conversation = await make.aconversation(
        enabled_tools=["get_current_time", "fault_raiser", "fault_sleeper"]
    )
    fake_openai.enqueue(tool_turn([("call_bad", name, arguments)]), text_turn("Sorry about that."))
    started = time.monotonic()

    run = await run_once(conversation, "go", fake_openai.base_url)

    assert time.monotonic() - started < 2
    assert (run.status, run.error, run.steps) == ("completed", "", 2)
    (log,) = await tool_calls(run)
    assert (log.name, log.arguments, log.status, log.result) == (
        name or "unnamed_tool",
        arguments,
        "failed",
        json.dumps({"error": log.error}),
    )
    assert log.error.startswith(expected)
    assert log.duration is not None and log.duration < 1
    messages = await make.ahistory(conversation)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[2].content == log.result and messages[-1].content == "Sorry about that."
    assert history.validate(messages) == []
    second = fake_openai.requests[1].body["messages"]
    assert second[1]["tool_calls"][0]["function"] == {
        "name": name or "unnamed_tool",
        "arguments": arguments,
    }
    assert second[2] == {"role": "tool", "content": log.result, "tool_call_id": "call_bad"}
    assert [c.finish_reason for c in await model_calls(run)] == ["tool_calls", "stop"]
    await assert_next_message_works(fake_openai, conversation)


@pytest.mark.usefixtures("fault_tools")
async def test_a_huge_tool_result_is_stored_whole(fake_openai: FakeOpenAIServer) -> None:
    conversation = await make.aconversation(enabled_tools=["fault_huge"])
    fake_openai.enqueue(tool_turn([("call_huge", "fault_huge", "{}")]), text_turn("That is big."))

    run = await run_once(conversation, "go", fake_openai.base_url)

    assert (run.status, run.error) == ("completed", "")
    (log,) = await tool_calls(run)
    assert log.status == "completed"
    assert len(log.result) == len(HUGE) == 1_048_576 and log.result == HUGE
    messages = await make.ahistory(conversation)
    assert messages[2].role == "tool" and len(messages[2].content or "") == len(HUGE)
    assert messages[2].content == HUGE
    assert fake_openai.requests[1].body["messages"][2]["content"] == HUGE
    assert history.validate(messages) == []
    await assert_next_message_works(fake_openai, conversation)


@pytest.fixture
def slow_tool() -> Iterator[None]:
    async def fault_slow(arguments: dict[str, Any]) -> str:
        await asyncio.sleep(5)
        return "never"

    agent.default_registry.register(
        agent.ToolDefinition(name="fault_slow", description="slow"), fault_slow, read_only=True
    )
    try:
        yield
    finally:
        agent.default_registry.unregister("fault_slow")


async def cancelled_run(
    fake_openai: FakeOpenAIServer, conversation: Conversation, kind: type[events.RunEvent]
) -> Run:
    """Start a run and cancel it once it told `kind`: the cancel lands within a second, and the
    provider is asked nothing more."""
    seen = Seen()
    handle = await start(conversation, "go", fake_openai.base_url, seen)
    await seen.first(kind)
    await asyncio.sleep(0.1)
    cancelled_at = time.monotonic()
    assert runs.cancel_run(handle.run.pk)
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await handle.task
    took = time.monotonic() - cancelled_at
    await asyncio.sleep(0.3)

    assert took < 1
    assert len(fake_openai.requests) == 1
    return await Run.objects.aget(pk=handle.run.pk)


@pytest.mark.usefixtures("slow_tool")
async def test_cancel_during_a_slow_tool(fake_openai: FakeOpenAIServer) -> None:
    conversation = await make.aconversation(enabled_tools=["fault_slow"])
    fake_openai.enqueue(tool_turn([("call_slow", "fault_slow", "{}")]))

    run = await cancelled_run(fake_openai, conversation, events.ToolCallStarted)

    assert (run.status, run.error) == ("cancelled", "Cancelled by the user.")
    (log,) = await tool_calls(run)
    assert (log.status, log.error) == ("cancelled", "Cancelled by the user.")
    messages = await make.ahistory(conversation)
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert "Cancelled by the user" in (messages[2].content or "")
    assert history.validate(messages) == []
    body = await assert_next_message_works(fake_openai, conversation)
    assert body["messages"][2]["tool_call_id"] == "call_slow"


async def test_cancel_mid_stream_keeps_the_partial_text_and_does_not_retry(
    fake_openai: FakeOpenAIServer,
) -> None:
    conversation = await make.aconversation()
    fake_openai.enqueue(text_turn("slow " * 200).but(chunk_delay=0.02))

    run = await cancelled_run(fake_openai, conversation, events.TextDelta)

    assert run.status == "cancelled"
    messages = await make.ahistory(conversation)
    assert [m.role for m in messages] == ["user", "assistant"]
    partial = messages[1].content or ""
    assert partial.startswith("slow ") and len(partial) < len("slow " * 200)
    assert history.validate(messages) == []
    (model_call,) = await model_calls(run)
    assert (model_call.http_status, model_call.error) == (200, "Cancelled by the user.")
    await assert_next_message_works(fake_openai, conversation)


@pytest.mark.usefixtures("fault_tools")
async def test_oversized_provider_values_are_fitted_and_nothing_is_lost(
    fake_openai: FakeOpenAIServer,
) -> None:
    """A 300-character id, a 250-character name and a 100-character finish_reason: PostgreSQL
    refuses values longer than their columns, and the turn's whole write would go with them."""
    conversation = await make.aconversation(enabled_tools=["get_current_time"])
    long_id, long_name, odd_reason = "c" * 300, "n" * 250, "r" * 100
    fake_openai.enqueue(
        tool_turn([(long_id, long_name, "{}")]),
        text_turn("Done.", finish_reason=odd_reason),
    )

    run = await run_once(conversation, "go", fake_openai.base_url)

    assert run.status == "completed", run.error
    (log,) = await tool_calls(run)
    assert log.name == "unnamed_tool" and log.status == "failed"
    assert log.call_id.startswith("call_") and len(log.call_id) <= 200
    finish = [c.finish_reason for c in await model_calls(run)]
    assert finish[0] == "tool_calls" and len(finish[1]) == 40 and finish[1].endswith("…")
    messages = await make.ahistory(conversation)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[2].tool_call_id == log.call_id and messages[-1].content == "Done."
    assert history.validate(messages) == []
