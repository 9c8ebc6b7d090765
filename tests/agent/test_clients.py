from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from chat.agent.clients import OpenAICompatibleChatClient
from chat.agent.contracts import AgentParameters
from chat.agent.errors import (
    ChatClientError,
    ProviderConnectionError,
    ProviderHTTPError,
    StreamError,
)
from chat.agent.events import ModelRequestSent, StreamItem, TextDelta, TurnEnd, Usage
from chat.agent.http import READ_PACING, retry_wait
from chat.agent.messages import ChatMessage, EmptyContent, ToolCall
from chat.agent.tools import ToolDefinition
from chat.agent.wire import WireFormat, build_request_body
from chat.testing.openai_script import ScriptedResponse, chunk, error, sse, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer, client_for
from chat.testing.processes import free_port

API_KEY = "sk-test-0123456789abcdefSECRET"
HELLO = [ChatMessage(role="user", content="Hello")]
CLOCK = ToolDefinition(name="clock", description="Tell the time.")


def make_client(base_url: str, **options: Any) -> OpenAICompatibleChatClient:
    return client_for(base_url, **{"api_key": API_KEY, **options})


@pytest.fixture
async def client(fake_openai: FakeOpenAIServer) -> AsyncIterator[OpenAICompatibleChatClient]:
    async with make_client(fake_openai.base_url) as client:
        yield client


async def collect(
    client: OpenAICompatibleChatClient,
    messages: list[ChatMessage] = HELLO,
    **options: Any,
) -> list[StreamItem]:
    async with asyncio.timeout(5):
        return [item async for item in client.stream(messages, **options)]


async def failure(
    client: OpenAICompatibleChatClient, messages: list[ChatMessage] = HELLO, **options: Any
) -> tuple[ChatClientError, list[StreamItem]]:
    """The error a stream ends with, and the items yielded before it."""
    items: list[StreamItem] = []
    with pytest.raises(ChatClientError) as caught:
        async with asyncio.timeout(5):
            async for item in client.stream(messages, **options):
                items.append(item)
    assert_no_secret(caught.value)
    return caught.value, items


def assert_no_secret(exc: BaseException, *secrets: str) -> None:
    for secret in (API_KEY, *secrets):
        assert secret not in str(exc)
        assert secret not in repr(exc)
        assert all(secret not in str(arg) for arg in exc.args)
        if isinstance(exc, ChatClientError):
            assert secret not in str(exc.request_body)


def text_of(items: list[StreamItem]) -> str:
    return "".join(item.text for item in items if isinstance(item, TextDelta))


async def test_text_stream_yields_request_deltas_usage_and_turn_end_in_order(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    fake_openai.enqueue(text_turn("Hello there, friend.", usage=(12, 5)))

    items = await collect(client)

    first, *middle, last = items
    assert isinstance(first, ModelRequestSent)
    assert first.body == fake_openai.requests[0].body
    assert (first.status_code, first.attempts) == (200, 1)
    assert text_of(middle) == "Hello there, friend."
    assert middle[-1] == Usage(prompt_tokens=12, completion_tokens=5, total_tokens=17)
    assert isinstance(last, TurnEnd)
    assert last.message == ChatMessage(role="assistant", content="Hello there, friend.")
    assert last.finish_reason == "stop"
    assert client.label == "fake-model"


async def test_deltas_are_yielded_as_they_arrive(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    fake_openai.enqueue(text_turn("abcdefgh", chunk_size=2).but(chunk_delay=0.03))
    arrivals: list[tuple[StreamItem, float]] = []

    async for item in client.stream(HELLO):
        arrivals.append((item, time.monotonic()))

    first_delta = next(at for item, at in arrivals if isinstance(item, TextDelta))
    assert arrivals[-1][1] - first_delta > 0.06


async def paced_arrivals(
    client: OpenAICompatibleChatClient, pacing: Callable[[], float] | None
) -> list[float]:
    """When each text delta arrived, reading with READ_PACING set to `pacing`."""
    arrivals: list[float] = []

    async def read() -> None:
        if pacing is not None:
            READ_PACING.set(pacing)
        async for item in client.stream(HELLO):
            if isinstance(item, TextDelta):
                arrivals.append(time.monotonic())

    await asyncio.create_task(read())
    return arrivals


def batches(arrivals: list[float]) -> int:
    """Groups of deltas that arrived together (within 3 ms of the previous one)."""
    return 1 + sum(1 for before, after in itertools.pairwise(arrivals) if after - before > 0.003)


async def test_a_trickling_stream_is_read_once_per_frame_when_paced(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    """With READ_PACING, a model sending a token every 10 ms is read every 50 ms (each read
    takes the tokens that came meanwhile); without, every token is read on its own. The
    first token is never held back."""
    text = "abcdefghijklmnopqrstuvwxyz0123"
    fake_openai.enqueue(
        text_turn(text, chunk_size=1).but(chunk_delay=0.01),
        text_turn(text, chunk_size=1).but(chunk_delay=0.01),
    )
    free = await paced_arrivals(client, None)
    started = time.monotonic()
    first: list[float] = []

    def pacing() -> float:
        # As the publisher does: the next frame is 50 ms after the first text.
        now = time.monotonic()
        if not first:
            first.append(now)
        return first[0] + 0.05 * (1 + int((now - first[0]) / 0.05))

    paced = await paced_arrivals(client, pacing)
    assert len(free) == len(paced) == len(text)
    assert batches(free) >= len(text) - 3
    assert batches(paced) <= len(text) // 3
    assert paced[0] - started < 0.1  # the first token: headers, then at once


async def test_request_goes_to_chat_completions_with_the_bearer_key(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    fake_openai.enqueue(text_turn("ok"))

    await collect(client)

    request = fake_openai.requests[0]
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["content-type"] == "application/json"


async def test_no_key_means_no_authorization_header(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(text_turn("ok"))

    async with make_client(fake_openai.base_url + "/", api_key=None) as client:
        await collect(client)

    assert "authorization" not in fake_openai.requests[0].headers


async def test_query_parameters_of_the_base_url_are_kept(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(text_turn("ok"))

    async with make_client(fake_openai.base_url + "?api-version=2024-10-21") as client:
        await collect(client)
        assert client.base_url == fake_openai.base_url

    assert fake_openai.requests[0].path == "/v1/chat/completions?api-version=2024-10-21"


async def test_tool_call_fragments_become_one_call(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    arguments = '{"timezone": "Europe/Paris"}'
    fake_openai.enqueue(tool_turn([("call_1", "clock", arguments)], fragment_size=3))

    items = await collect(client, tools=[CLOCK])

    turn = items[-1]
    assert isinstance(turn, TurnEnd)
    assert turn.finish_reason == "tool_calls"
    assert turn.message.tool_calls == (ToolCall(id="call_1", name="clock", arguments=arguments),)
    assert turn.message.content is None


async def test_parallel_interleaved_calls_and_text(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    calls = [("call_1", "clock", '{"timezone": "UTC"}'), ("call_2", "clock", "{}")]
    fake_openai.enqueue(tool_turn(calls, text="Checking both.", interleave=True, usage=(9, 4)))

    items = await collect(client, tools=[CLOCK])

    turn = items[-1]
    assert isinstance(turn, TurnEnd)
    assert [(call.id, call.arguments) for call in turn.message.tool_calls] == [
        (call_id, arguments) for call_id, _, arguments in calls
    ]
    assert turn.message.content == "Checking both."
    assert Usage(9, 4, 13) in items


async def test_body_without_tools_has_no_tool_keys(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    fake_openai.enqueue(text_turn("ok"))

    await collect(client)

    body = fake_openai.requests[0].body
    assert body == {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "Hello"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_body_with_tools_and_parameters(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    fake_openai.enqueue(text_turn("ok"))
    parameters = AgentParameters(model="other-model", temperature=0.2, top_p=0.9, max_tokens=64)

    await collect(client, tools=[CLOCK], parameters=parameters)

    body = fake_openai.requests[0].body
    assert body["model"] == "other-model"
    assert body["tools"] == [CLOCK.to_openai()]
    assert (body["tool_choice"], body["parallel_tool_calls"]) == ("auto", True)
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.2, 0.9, 64)
    assert body["stream_options"] == {"include_usage": True}


def test_build_request_body_without_streaming_has_no_stream_options() -> None:
    body = build_request_body(
        HELLO, model="m", tools=(), parameters=AgentParameters(), stream=False
    )

    assert body["stream"] is False
    assert "stream_options" not in body


def tool_history() -> list[ChatMessage]:
    call = ToolCall(id="call_1", name="clock", arguments="{}")
    return [
        ChatMessage(role="user", content="Time?"),
        ChatMessage(role="assistant", tool_calls=(call,)),
        ChatMessage(role="tool", content='{"iso": "now"}', tool_call_id="call_1"),
    ]


@pytest.mark.parametrize(
    ("empty_content", "expected"),
    [("empty", {"content": ""}), ("null", {"content": None}), ("omit", {})],
)
async def test_empty_content_variants_for_tool_call_only_messages(
    fake_openai: FakeOpenAIServer, empty_content: EmptyContent, expected: dict[str, Any]
) -> None:
    fake_openai.enqueue(text_turn("It is now."))

    async with make_client(
        fake_openai.base_url, wire=WireFormat(empty_content=empty_content)
    ) as client:
        await collect(client, tool_history(), tools=[CLOCK])

    sent = fake_openai.requests[0].body["messages"][1]
    assert {key: sent[key] for key in sent if key == "content"} == expected
    assert sent["tool_calls"][0]["id"] == "call_1"


async def test_a_provider_rejecting_null_content_answers_400(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.reject_null_content = True

    async with make_client(fake_openai.base_url, wire=WireFormat(empty_content="null")) as client:
        exc, _ = await failure(client, tool_history(), tools=[CLOCK])

    assert isinstance(exc, ProviderHTTPError)
    assert exc.status_code == 400
    assert "null is not allowed" in exc.message


async def test_429_with_retry_after_then_success(
    fake_openai: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake_openai.enqueue(
        error(429, "Rate limit reached", headers={"Retry-After": "0"}), text_turn("ok")
    )
    caplog.set_level(logging.WARNING, logger="chat.agent.clients")

    # A backoff of 30s would time the test out: the Retry-After of 0 must win.
    async with make_client(fake_openai.base_url, backoff=30) as client:
        items = await collect(client)

    assert len(fake_openai.requests) == 2
    assert isinstance(items[0], ModelRequestSent)
    assert items[0].attempts == 2
    assert "Rate limit reached" in caplog.text
    assert API_KEY not in caplog.text


async def test_retry_after_is_capped_by_max_retry_wait(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(error(503, "busy", headers={"Retry-After": "120"}), text_turn("ok"))
    started = time.monotonic()

    async with make_client(fake_openai.base_url, max_retry_wait=0.05) as client:
        items = await collect(client)

    assert 0.05 <= time.monotonic() - started < 2
    assert text_of(items) == "ok"


async def test_429_gives_up_after_the_retries(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(*[error(429, "Slow down", headers={"Retry-After": "0"})] * 3)

    async with make_client(fake_openai.base_url, max_retries=2) as client:
        exc, items = await failure(client)

    assert isinstance(exc, ProviderHTTPError)
    assert (exc.status_code, exc.message, exc.attempts) == (429, "Slow down", 3)
    assert exc.request_body == fake_openai.requests[-1].body
    assert len(fake_openai.requests) == 3
    assert items == []


async def test_500_is_retried_then_reported(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(error(500, "boom", type="server_error"), error(500, "boom again"))

    async with make_client(fake_openai.base_url, max_retries=1) as client:
        exc, _ = await failure(client)

    assert isinstance(exc, ProviderHTTPError)
    assert (exc.status_code, exc.message, exc.attempts) == (500, "boom again", 2)
    assert str(exc) == "HTTP 500: boom again"


async def test_400_is_not_retried(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    fake_openai.enqueue(error(400, "Unsupported parameter: 'top_p'"), text_turn("unused"))

    exc, _ = await failure(client)

    assert isinstance(exc, ProviderHTTPError)
    assert (exc.status_code, exc.attempts) == (400, 1)
    assert exc.message == "Unsupported parameter: 'top_p'"
    assert len(fake_openai.requests) == 1


async def test_an_invalid_history_is_rejected_by_the_strict_server(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    orphan = ChatMessage(role="tool", content="{}", tool_call_id="call_9")

    exc, _ = await failure(client, [*HELLO, orphan])

    assert exc.status_code == 400
    assert "call_9" in exc.message


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"error": "plain error string"}, "plain error string"),
        ({"message": "top-level message"}, "top-level message"),
        ({"detail": "Not authorised"}, "Not authorised"),
        ({"detail": [{"msg": "field required"}]}, '[{"msg": "field required"}]'),
        ([{"error": {"code": 400, "message": "wrapped in a list"}}], "wrapped in a list"),
    ],
)
async def test_provider_error_shapes(
    fake_openai: FakeOpenAIServer,
    client: OpenAICompatibleChatClient,
    body: Any,
    expected: str,
) -> None:
    fake_openai.enqueue(ScriptedResponse(status=422, json_body=body))

    exc, _ = await failure(client)

    assert exc.message == expected


async def test_echoed_api_key_is_redacted(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    fake_openai.enqueue(error(401, f"Incorrect API key provided: {API_KEY}."))

    exc, _ = await failure(client)

    assert exc.status_code == 401
    assert exc.message == "Incorrect API key provided: [REDACTED]."


async def test_connection_refused_is_retried_then_reported() -> None:
    port = free_port()
    url = f"http://admin:hunter2@127.0.0.1:{port}/v1?api-key=qwerty"

    async with make_client(url, max_retries=1) as client:
        exc, _ = await failure(client)

    assert isinstance(exc, ProviderConnectionError)
    assert exc.message.startswith(f"could not connect to http://127.0.0.1:{port}/v1: ")
    assert exc.attempts == 2
    assert_no_secret(exc, "hunter2", "qwerty")


async def test_no_first_byte_before_the_read_timeout(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(text_turn("too late").but(delay=2))
    started = time.monotonic()

    async with make_client(fake_openai.base_url, read_timeout=0.2) as client:
        exc, items = await failure(client)

    assert isinstance(exc, ProviderConnectionError)
    assert exc.message == "no response within 0.2s (read timeout)"
    assert items == []
    assert len(fake_openai.requests) == 1
    assert time.monotonic() - started < 1.5


async def test_connection_cut_mid_stream_keeps_the_partial_text(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    fake_openai.enqueue(text_turn("Hello streaming world", chunk_size=5).but(cut_after=3))
    fake_openai.enqueue(text_turn("a retry must not happen"))

    exc, items = await failure(client)

    assert isinstance(exc, StreamError)
    assert "dropped mid-stream after 10 characters" in exc.message
    assert exc.partial == ChatMessage(role="assistant", content="Hello stre")
    assert text_of(items) == "Hello stre"
    assert (exc.status_code, exc.request_body) == (200, fake_openai.requests[0].body)
    assert len(fake_openai.requests) == 1


async def test_a_stall_mid_stream_keeps_the_partial_text(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(text_turn("Hello streaming world", chunk_size=5).but(stall=(2, 2)))

    async with make_client(fake_openai.base_url, read_timeout=0.2) as client:
        exc, _ = await failure(client)

    assert isinstance(exc, StreamError)
    assert "no data within 0.2s (read timeout) after 5 characters" in exc.message
    assert exc.partial == ChatMessage(role="assistant", content="Hello")


async def test_a_redirect_is_reported_with_its_target(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    fake_openai.enqueue(
        ScriptedResponse(status=308, headers=(("Location", "https://api.example.com/v1"),))
    )

    exc, _ = await failure(client)

    assert isinstance(exc, ProviderHTTPError)
    assert exc.status_code == 308
    assert (
        exc.message
        == "Permanent Redirect (redirected to https://api.example.com/v1: check the base URL)"
    )


REJECTED = {"error": {"message": f"upstream rejected key {API_KEY}", "code": 502}}


@pytest.mark.parametrize(
    ("response", "partial", "message"),
    [
        (
            sse(chunk({"content": "Half"}), done=False),
            "Half",
            "the stream ended before a finish_reason",
        ),
        (
            sse(chunk({"content": "ok so"}), 'data: {"choices": [', ""),
            "ok so",
            'malformed stream chunk: unparseable data: {"choices": [',
        ),
        (
            sse(chunk({"content": "Once"}), REJECTED),
            "Once",
            "the provider reported an error mid-stream: upstream rejected key [REDACTED] (502)",
        ),
    ],
    ids=["no finish_reason", "malformed chunk", "error event, redacted"],
)
async def test_a_broken_stream_keeps_the_partial_text_and_is_not_retried(
    fake_openai: FakeOpenAIServer,
    client: OpenAICompatibleChatClient,
    response: ScriptedResponse,
    partial: str,
    message: str,
) -> None:
    fake_openai.enqueue(response)

    exc, _ = await failure(client)

    assert isinstance(exc, StreamError)
    assert exc.message == message
    assert exc.partial == ChatMessage(role="assistant", content=partial)
    assert exc.attempts == 1


async def test_a_non_streamed_json_answer_is_accepted(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    completion = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "All at once"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
    }
    fake_openai.enqueue(ScriptedResponse(status=200, json_body=completion))

    items = await collect(client)

    assert items[1:] == [
        TextDelta("All at once"),
        Usage(3, 3, 6),
        TurnEnd(ChatMessage(role="assistant", content="All at once"), "stop"),
    ]


async def test_list_models(
    fake_openai: FakeOpenAIServer, client: OpenAICompatibleChatClient
) -> None:
    fake_openai.models = ["alpha", "beta"]

    assert await client.list_models() == ["alpha", "beta"]
    assert fake_openai.requests[0].path == "/v1/models"
    assert fake_openai.requests[0].headers["authorization"] == f"Bearer {API_KEY}"


async def test_list_models_connection_failure() -> None:
    async with make_client(f"http://127.0.0.1:{free_port()}/v1", max_retries=0) as client:
        with pytest.raises(ProviderConnectionError, match="could not connect"):
            await client.list_models()


async def test_aclose_leaves_an_injected_http_client_open(fake_openai: FakeOpenAIServer) -> None:
    async with httpx.AsyncClient() as http_client:
        client = make_client(fake_openai.base_url, http_client=http_client)
        await client.aclose()

        assert not http_client.is_closed


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, 0.5 * 2**2),
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"Retry-After": "9999"}, 10.0),
        ({"Retry-After": "-4"}, 0.0),
        ({"Retry-After": "soon"}, 2.0),
    ],
)
def test_retry_wait(headers: dict[str, str], expected: float) -> None:
    assert retry_wait(headers, retry=2, backoff=0.5, max_wait=10.0) == expected


def test_retry_wait_reads_an_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=5), usegmt=True)

    assert 3 < retry_wait({"Retry-After": when}, retry=0, backoff=0, max_wait=30) <= 5


async def test_clients_share_one_certificate_verifying_tls_context() -> None:
    """Loading the CA bundle per client cost every run ~20 ms of CPU; verification stays on."""
    first = OpenAICompatibleChatClient(base_url="https://api.example.test/v1", model="m")
    second = OpenAICompatibleChatClient(base_url="https://other.example.test/v1", model="m")
    try:
        contexts = [client._client._transport._pool._ssl_context for client in (first, second)]  # type: ignore[attr-defined]
        assert contexts[0] is contexts[1]
        assert contexts[0].verify_mode == ssl.CERT_REQUIRED and contexts[0].check_hostname
    finally:
        await first.aclose()
        await second.aclose()


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
async def test_a_compressed_stream_reads_like_a_plain_one(encoding: str) -> None:
    """Plain bodies are split straight from the socket; a compressed one is decoded first."""
    chunks = [
        chunk({"role": "assistant", "content": "Grüße, "}),
        chunk({"content": "world"}, finish_reason="stop"),
    ]
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n"
    if encoding == "gzip":
        body = gzip.compress(body)

    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream", "content-encoding": encoding}
        return httpx.Response(200, headers=headers, content=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http_client:
        client = make_client("http://provider.test/v1", http_client=http_client)
        items = await collect(client)

    assert text_of(items) == "Grüße, world"
    assert isinstance(items[-1], TurnEnd)
    assert items[-1].finish_reason == "stop"
