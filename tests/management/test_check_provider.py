"""Tests of manage.py check_provider and chat.agent.probes, against a real local server."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from datetime import date
from io import StringIO
from typing import Any

import pytest
from django.conf import LazySettings
from django.core.management import CommandError, call_command

from chat.agent.probes.report import IMAGE_PNG, IMAGE_PROMPT
from chat.models import ProviderProfile
from chat.testing.openai_script import error, text_only, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer

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
        text_turn("Red."),
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
    assert out.count("accepted") == 3
    assert "AGENTLAB_TOOL_CALL_CONTENT" not in out
    assert "images          accepted: 'Red.'" in out
    assert out.rstrip().endswith("Chat works; tool calling works.")
    requests = fake_openai.requests
    assert [r.method for r in requests] == ["GET", "POST", "POST", "POST", "POST", "POST"]
    assert all(r.headers["authorization"] == f"Bearer {SECRET}" for r in requests)
    assert "tools" not in requests[1].body and requests[2].body["tools"]
    follow_ups = [r.body["messages"][1] for r in requests[3:5]]
    assert [m["content"] for m in follow_ups] == ["", None]
    assert follow_ups[0]["tool_calls"][0]["id"] == "call_1"
    # The image probe: a small PNG as an image_url part after the question, as a run sends it
    # (the strict server checked the parts against the request schema).
    assert requests[5].body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": IMAGE_PROMPT},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{IMAGE_PNG}"}},
            ],
        }
    ]


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


def test_another_base_url_is_probed_without_the_environment_key(
    fake_openai: FakeOpenAIServer, settings: LazySettings
) -> None:
    """OPENAI_API_KEY belongs to OPENAI_BASE_URL; --api-key or --api-key-env send one elsewhere."""
    settings.OPENAI_BASE_URL = "http://provider.invalid/v1"
    settings.OPENAI_API_KEY = SECRET
    fake_openai.enqueue(text_turn("pong"), tool_turn([CALL]), text_turn("a"), text_turn("b"))
    out, err = StringIO(), StringIO()

    call_command("check_provider", "--base-url", fake_openai.base_url, stdout=out, stderr=err)

    assert all(r.headers.get("authorization") is None for r in fake_openai.requests)
    assert "no key sent" in err.getvalue() and SECRET not in out.getvalue() + err.getvalue()


# --save-profile: what the probe found, written to a ProviderProfile (never the key).

ALNUM9 = re.compile(r"^[a-zA-Z0-9]{9}$")
MISTRAL_CALL = ("aB3dE5fG7", "get_current_time", '{"timezone": "UTC"}')


def mistral_rules(body: Any) -> str | None:
    """Mistral's quirks: 9-character alphanumeric tool call ids, no parallel_tool_calls."""
    for message in body["messages"]:
        ids = [call["id"] for call in message.get("tool_calls") or ()]
        if message.get("role") == "tool":
            ids.append(message.get("tool_call_id", ""))
        for call_id in ids:
            if not ALNUM9.match(call_id):
                return f"Tool call id was {call_id} but must be a-z, A-Z, 0-9, with a length of 9."
    if "parallel_tool_calls" in body:
        return "parallel_tool_calls: Extra inputs are not permitted"
    return None


@pytest.fixture
def mistral() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(models=("mistral-small-latest",)) as server:
        server.checks.append(mistral_rules)
        yield server


def saved(**fields: Any) -> ProviderProfile:
    return ProviderProfile.objects.get(**fields)


def no_secret_in_the_database(secret: str) -> None:
    dump = StringIO()
    call_command("dumpdata", "chat", stdout=dump)
    assert dump.getvalue().count('"model": "chat.providerprofile"') >= 1
    assert secret not in dump.getvalue()


@pytest.mark.django_db
def test_save_profile_for_a_mistral_like_provider(
    mistral: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MISTRAL_API_KEY", SECRET)
    mistral.enqueue(text_turn("pong"), tool_turn([MISTRAL_CALL]), text_turn("a"), text_turn("b"))
    mistral.checks.append(text_only)  # this model takes no images
    out = StringIO()

    call_command(
        "check_provider",
        "--base-url",
        mistral.base_url,
        "--save-profile",
        "mistral",
        "--api-key-env",
        "MISTRAL_API_KEY",
        stdout=out,
        stderr=StringIO(),
    )

    text = out.getvalue()
    assert SECRET not in text
    assert "parallel calls  parallel_tool_calls REFUSED: HTTP 400: parallel_tool_calls" in text
    assert "(9 letters or digits, like Mistral's); ours (call_probe_0001) REFUSED" in text
    assert "images          REFUSED: HTTP 400: Invalid content type. image_url is only" in text
    assert "Created provider profile 'mistral'" in text
    assert "api_key_env         MISTRAL_API_KEY (set in this process" in text
    assert "tool_call_ids       alnum9" in text and "parallel_tool_calls no" in text
    profile = saved(name="mistral")
    assert (profile.base_url, profile.model, profile.api_key_env) == (
        mistral.base_url,
        "mistral-small-latest",
        "MISTRAL_API_KEY",
    )
    assert profile.tool_call_content == "empty"
    assert profile.tool_call_ids == "alnum9"
    assert profile.reasoning_field == ""
    assert profile.parallel_tool_calls is False
    assert profile.accepts_images is False
    assert profile.notes.startswith(f"check_provider {date.today().isoformat()}: ")
    assert "parallel_tool_calls refused" in profile.notes and "images refused" in profile.notes
    assert "call_probe_0001 refused" in profile.notes
    no_secret_in_the_database(SECRET)
    # The key came from the variable the profile names; the probes adapted to the refusals.
    posts = [r for r in mistral.requests if r.method == "POST"]
    assert all(r.headers["authorization"] == f"Bearer {SECRET}" for r in mistral.requests)
    assert posts[1].body["parallel_tool_calls"] is True
    assert all("parallel_tool_calls" not in r.body for r in posts[2:])
    assert posts[-2].body["messages"][1]["tool_calls"][0]["id"] == "call_probe_0001"
    assert [r.body["messages"][1]["content"] for r in posts[3:5]] == ["", None]


@pytest.mark.django_db
def test_rerunning_updates_the_profile_instead_of_adding_one(
    mistral: FakeOpenAIServer,
) -> None:
    for _ in range(2):
        mistral.enqueue(text_turn("pong"), tool_turn([MISTRAL_CALL]), text_turn("a"))
        mistral.enqueue(text_turn("b"), text_turn("Red."))
    check(mistral, "--save-profile", "mistral", "--model", "mistral-small-latest")
    first = saved(name="mistral")
    ProviderProfile.objects.filter(pk=first.pk).update(
        tool_call_ids="any", parallel_tool_calls=True, notes="stale", available_to_everyone=True
    )

    out = check(mistral, "--save-profile", "mistral", "--model", "mistral-large-latest")

    assert "Updated provider profile 'mistral'" in out
    assert ProviderProfile.objects.count() == 1
    profile = saved(name="mistral")
    assert profile.pk == first.pk and profile.created_at == first.created_at
    assert profile.model == "mistral-large-latest"
    assert (profile.tool_call_ids, profile.parallel_tool_calls) == ("alnum9", False)
    assert profile.notes != "stale"
    assert profile.available_to_everyone, "who may use it is the admin's to decide"
    assert profile.accepts_images is True
    assert profile.api_key_env == "OPENAI_API_KEY"  # the default; the key was --api-key
    no_secret_in_the_database(SECRET)


@pytest.mark.django_db
def test_save_profile_for_a_deepseek_like_provider() -> None:
    """Streams reasoning_content, refuses "" content; ids and parallel_tool_calls are fine."""
    with FakeOpenAIServer(reject_empty_content=True, models=("deepseek-chat",)) as server:
        server.enqueue(
            text_turn("pong", reasoning="The user wants pong."),
            tool_turn([("call_00_xyz", "get_current_time", "{}")]),
            text_turn("noon", reasoning="Got the time."),
            text_turn("noon"),
        )
        out = check(server, "--save-profile", "deepseek", "--api-key-env", "DEEPSEEK_API_KEY")

    assert "parallel_tool_calls sent, not refused" in out
    assert "ours (call_probe_0001) taken too" in out
    assert "api_key_env         DEEPSEEK_API_KEY (NOT set in this process" in out
    profile = saved(name="deepseek")
    assert profile.reasoning_field == "reasoning_content"
    assert profile.tool_call_content == "null"
    assert profile.tool_call_ids == "any"
    assert profile.parallel_tool_calls is True
    assert profile.api_key_env == "DEEPSEEK_API_KEY"
    assert "reasoning: reasoning_content" in profile.notes
    no_secret_in_the_database(SECRET)


@pytest.mark.django_db
def test_ids_of_our_making_refused_means_alnum9_ids() -> None:
    """A server whose own ids are free-form but which refuses ids it did not make."""
    with FakeOpenAIServer() as server:
        server.checks.append(
            lambda body: "unknown tool_call_id" if "call_probe_0001" in json.dumps(body) else None
        )
        server.enqueue(text_turn("pong"), tool_turn([CALL]), text_turn("a"), text_turn("b"))
        check(server, "--save-profile", "picky-ids")
    assert saved(name="picky-ids").tool_call_ids == "alnum9"


@pytest.mark.django_db
def test_json_report_includes_the_saved_profile(mistral: FakeOpenAIServer) -> None:
    mistral.enqueue(text_turn("pong"), tool_turn([MISTRAL_CALL]), text_turn("a"), text_turn("b"))

    report = json.loads(check(mistral, "--json", "--save-profile", "mistral"))

    assert report["parallel_tool_calls"] is False and report["tool_call_ids"] == "alnum9"
    assert report["saved_profile"]["created"] is True
    assert report["saved_profile"]["tool_call_ids"] == "alnum9"
    assert report["saved_profile"]["api_key_env"] == "OPENAI_API_KEY"


@pytest.mark.django_db
def test_nothing_is_saved_when_tool_calling_fails(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(text_turn("pong"), text_turn("It is probably noon."), text_turn("x"))
    fake_openai.enqueue(text_turn("y"))

    out, message = failing(fake_openai, "--save-profile", "broken")

    assert message == "The provider failed the probe: tool calling. Profile 'broken' not saved."
    assert "provider profile" not in out
    assert not ProviderProfile.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--api-key-env", "sk-live-0123456789"], "--api-key-env 'sk-live-0123456789': Enter"),
        (["--api-key-env", "1KEY"], "the name of an environment variable"),
        (["--api-key-env", "SECRET_KEY"], "one of the server's own secrets"),
        (["--api-key-env", "SOMEONES_TOKEN"], "AGENTLAB_KEY_VARIABLES"),
        (["--save-profile", "  "], "--save-profile needs a name"),
    ],
)
def test_bad_profile_options_are_refused_before_probing(
    fake_openai: FakeOpenAIServer, args: list[str], expected: str
) -> None:
    options = ["--save-profile", "p", *args] if "--save-profile" not in args else args
    _, message = failing(fake_openai, *options)
    assert expected in message
    assert fake_openai.requests == []
    assert not ProviderProfile.objects.exists()


@pytest.mark.django_db
def test_a_base_url_with_credentials_is_not_saved(fake_openai: FakeOpenAIServer) -> None:
    with pytest.raises(CommandError, match="carries a key in its query string"):
        call_command(
            "check_provider",
            "--base-url",
            f"{fake_openai.base_url}?api-key=abc",
            "--save-profile",
            "p",
            stdout=StringIO(),
            stderr=StringIO(),
        )
    assert fake_openai.requests == [] and not ProviderProfile.objects.exists()


@pytest.mark.django_db
def test_a_probe_that_cannot_tell_keeps_what_the_profile_knew(
    mistral: FakeOpenAIServer,
) -> None:
    """The image probe answered neither yes nor no (a server fault): the profile keeps what an
    earlier probe found."""
    mistral.enqueue(text_turn("pong"), tool_turn([MISTRAL_CALL]), text_turn("a"), text_turn("b"))
    mistral.enqueue(text_turn("Red."))
    check(mistral, "--save-profile", "mistral")
    assert saved(name="mistral").accepts_images is True
    mistral.enqueue(text_turn("pong"), tool_turn([MISTRAL_CALL]), text_turn("a"), text_turn("b"))
    mistral.enqueue(error(503, "overloaded", type="server_error"))

    out = check(mistral, "--save-profile", "mistral")

    assert "images          FAILED: HTTP 503" in out
    assert saved(name="mistral").accepts_images is True
