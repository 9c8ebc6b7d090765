from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from io import StringIO

import pytest
from django.conf import LazySettings
from django.core.management import CommandError, call_command

from tests.fake_openai import FakeOpenAIServer, error, text_turn, tool_turn

SECRET = "sk-probe-secret-0123456789"
CALL = ("call_1", "get_current_time", '{"timezone": "UTC"}')


def check(server: FakeOpenAIServer, *args: str) -> str:
    out, err = StringIO(), StringIO()
    try:
        call_command(
            "check_provider",
            "--base-url",
            server.base_url,
            "--api-key",
            SECRET,
            *args,
            stdout=out,
            stderr=err,
        )
    finally:
        assert SECRET not in out.getvalue() + err.getvalue()
    return out.getvalue()


def failing(server: FakeOpenAIServer, *args: str) -> tuple[str, str]:
    out = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command(
            "check_provider", "--base-url", server.base_url, *args, stdout=out, stderr=StringIO()
        )
    return out.getvalue(), str(raised.value)


@pytest.fixture
def picky() -> Iterator[FakeOpenAIServer]:
    """A provider that refuses `null` content on a tool-call-only assistant message."""
    with FakeOpenAIServer(reject_null_content=True, models=("m-1", "m-2")) as server:
        yield server


def test_a_provider_that_does_everything(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(
        text_turn("Sure: pong.", reasoning="The user wants pong.", usage=(12, 3)),
        tool_turn([CALL], usage=(40, 9)),
        text_turn("It is noon."),
        text_turn("It is noon."),
    )

    out = check(fake_openai, "--model", "fake-model")

    assert "model fake-model · API key set" in out
    assert "models          1 listed: fake-model" in out
    assert "chat            ok: 'Sure: pong.'" in out and "streamed (SSE)" in out
    assert "usage chunk     yes: 12 prompt + 3 completion tokens" in out
    assert "reasoning       reasoning_content" in out
    assert (
        """tool calling    get_current_time({"timezone": "UTC"}); finish_reason 'tool_calls'"""
        in out
    )
    assert 'content ""' in out and "content null" in out
    assert out.count("accepted") == 2
    assert "AGENTLAB_TOOL_CALL_CONTENT" not in out
    assert out.rstrip().endswith("Chat works; tool calling works.")
    requests = fake_openai.requests
    assert [r.method for r in requests] == ["GET", "POST", "POST", "POST", "POST"]
    assert all(r.headers["authorization"] == f"Bearer {SECRET}" for r in requests)
    assert "tools" not in requests[1].body and requests[2].body["tools"]
    follow_ups = [r.body["messages"][1] for r in requests[3:]]
    assert [m["content"] for m in follow_ups] == ["", None]
    assert follow_ups[0]["tool_calls"][0]["id"] == "call_1"


def test_reports_a_refused_null_content_and_what_to_configure(
    picky: FakeOpenAIServer, settings: LazySettings
) -> None:
    settings.AGENTLAB_TOOL_CALL_CONTENT = "null"
    picky.enqueue(text_turn("pong"), tool_turn([CALL]), text_turn("noon"))

    out = check(picky, "--model", "m-2")

    assert 'content ""      accepted' in out
    assert "content null    rejected: HTTP 400: messages[1].content: null is not" in out
    assert "→ set AGENTLAB_TOOL_CALL_CONTENT=empty" in out
    assert "Chat works; tool calling works." in out


def test_usage_finish_reason_and_reasoning_field_as_the_provider_sends_them(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.enqueue(
        text_turn("pong", reasoning="hmm", reasoning_field="reasoning"),
        tool_turn([CALL], finish_reason="stop"),
        text_turn("noon"),
        text_turn("noon"),
    )

    out = check(fake_openai)

    assert "model fake-model" in out
    assert "usage chunk     no" in out
    assert "reasoning       reasoning" in out and "reasoning_content" not in out
    assert "finish_reason 'stop'" in out


def test_json_report(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(text_turn("pong", usage=(1, 1)), tool_turn([CALL]), text_turn("a"))
    fake_openai.enqueue(text_turn("b"))

    report = json.loads(check(fake_openai, "--json"))

    assert report["works"] is True and report["api_key_set"] is True
    assert report["models"] == ["fake-model"]
    assert report["chat"]["usage"] == {
        "prompt_tokens": 1,
        "completion_tokens": 1,
        "total_tokens": 2,
    }
    assert report["tools"]["finish_reason"] == "tool_calls"
    assert report["content"]["null"]["ok"] is True
    assert report["recommended_tool_call_content"] == "empty"


def test_no_tool_call_means_tool_calling_fails(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(text_turn("pong"), text_turn("It is probably noon."), text_turn("x"))
    fake_openai.enqueue(text_turn("y"))

    out, message = failing(fake_openai)

    assert "tool calling    FAILED: no tool call (finish_reason stop" in out
    assert "Chat works; tool calling does NOT work." in out
    assert message == "The provider failed the probe: tool calling."


def test_refusing_every_form_of_empty_content_fails_tool_calling() -> None:
    with FakeOpenAIServer(reject_null_content=True, reject_empty_content=True) as server:
        server.enqueue(text_turn("pong"), tool_turn([CALL]))
        out, message = failing(server)
    assert "content omitted rejected" in out
    assert out.count("rejected: HTTP 400") == 3
    assert message == "The provider failed the probe: tool calling."


def test_a_failing_chat_reports_the_providers_words(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(error(401, "Incorrect API key provided"))

    out, message = failing(fake_openai)

    assert "chat            FAILED: HTTP 401: Incorrect API key provided" in out
    assert message == "The provider failed the probe: chat and tool calling."


def test_no_model_to_probe() -> None:
    with FakeOpenAIServer(models=()) as server:
        out, message = failing(server)
    assert "models          0 listed: none" in out
    assert message == "No model to probe: pass --model or set AGENTLAB_MODEL."


def test_unreachable_provider() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = StringIO()

    with pytest.raises(
        CommandError,
        match=rf"Cannot reach the provider: could not connect to "
        rf"http://127.0.0.1:{port}/v1",
    ):
        call_command(
            "check_provider",
            "--base-url",
            f"http://127.0.0.1:{port}/v1",
            "--api-key",
            SECRET,
            stdout=out,
            stderr=StringIO(),
        )
    assert "unreachable" in out.getvalue() and SECRET not in out.getvalue()


def test_no_provider_configured() -> None:
    with pytest.raises(CommandError, match="pass --base-url or set OPENAI_BASE_URL"):
        call_command("check_provider", stdout=StringIO(), stderr=StringIO())


def test_defaults_come_from_settings(fake_openai: FakeOpenAIServer, settings: LazySettings) -> None:
    settings.OPENAI_BASE_URL = fake_openai.base_url
    settings.OPENAI_API_KEY = SECRET
    settings.AGENTLAB_MODEL = "configured-model"
    fake_openai.enqueue(text_turn("pong"), tool_turn([CALL]), text_turn("a"), text_turn("b"))
    out = StringIO()

    call_command("check_provider", stdout=out, stderr=StringIO())

    assert "model configured-model · API key set" in out.getvalue()
    assert "(the model 'configured-model' is not among them)" in out.getvalue()
    assert SECRET not in out.getvalue()
    assert fake_openai.requests[1].body["model"] == "configured-model"
