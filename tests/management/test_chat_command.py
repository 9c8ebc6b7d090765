"""Tests of manage.py chat: one user turn from the terminal, through the web's run path."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.conf import LazySettings
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from chat.agent import history
from chat.models import Conversation, ModelCall, ProviderProfile, Run, ToolCall
from chat.testing.openai_script import error, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.transcripts import load_history

pytestmark = pytest.mark.django_db(transaction=True)


def chat(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("chat", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_scripted_turn_streams_tools_and_usage() -> None:
    out, _ = chat("What time is it in Europe/Paris? Leave a handoff note too.", "--all-tools")

    assert "→ Get current time" in out and "→ Handoff note" in out
    assert "✓ Get current time" in out and "Europe/Paris" in out
    assert "Here is what the tools said" in out
    assert "Scripted model (offline)" in out and "completed" in out
    conversation = Conversation.objects.get()
    assert conversation.owner.username == "cli"
    assert history.validate(load_history(conversation)) == []


def test_json_output_and_multi_turn_continuation() -> None:
    out, _ = chat("what time is it?", "--all-tools", "--json")
    first = json.loads(out)
    assert first["status"] == "completed"
    assert [c["name"] for c in first["tool_calls"]] == ["get_current_time"]
    assert first["tool_calls"][0]["status"] == "completed"
    assert first["usage"]["total_tokens"] > 0
    assert "Get current time" in first["text"]

    out, _ = chat(
        "and a handoff note please", "--conversation", str(first["conversation"]), "--json"
    )
    second = json.loads(out)
    assert second["conversation"] == first["conversation"]
    assert [c["name"] for c in second["tool_calls"]] == ["handoff_note"]
    messages = load_history(Conversation.objects.get(pk=first["conversation"]))
    assert [m.role for m in messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert history.validate(messages) == []


def test_against_a_strict_openai_compatible_server(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(
        tool_turn(
            [
                ("call_a", "get_current_time", '{"timezone": "UTC"}'),
                ("call_b", "handoff_note", '{"note": "deploy"}'),
            ],
            usage=(20, 10),
        ),
        text_turn("Noted, and it is noon.", usage=(40, 6)),
        text_turn("You are welcome.", usage=(60, 4)),
    )
    base = ["--base-url", fake_openai.base_url, "--model", "m-1", "--api-key", "sk-test-secret"]
    out, _ = chat("time and note", "--all-tools", "--system", "Be brief.", *base, "--json")
    result = json.loads(out)
    assert result["status"] == "completed"
    assert result["text"] == "Noted, and it is noon."
    assert result["usage"] == {"prompt_tokens": 60, "completion_tokens": 16, "total_tokens": 76}

    out, _ = chat("thanks", "--conversation", str(result["conversation"]), *base, "--json")
    assert json.loads(out)["text"] == "You are welcome."

    bodies = [r.body for r in fake_openai.requests]
    first_turn = ["system", "user", "assistant", "tool", "tool"]
    assert [m["role"] for m in bodies[1]["messages"]] == first_turn
    assert [m["role"] for m in bodies[2]["messages"]] == [*first_turn, "assistant", "user"]
    assert bodies[0]["model"] == "m-1" and bodies[0]["stream"] is True
    assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-test-secret"
    for call in ModelCall.objects.all():
        assert "sk-test-secret" not in json.dumps(call.request) + call.error


def test_provider_failure_exits_non_zero_with_its_message(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(error(400, "Invalid value for 'temperature'"))
    with pytest.raises(CommandError, match="HTTP 400: Invalid value for 'temperature'"):
        chat("hi", "--base-url", fake_openai.base_url, "--model", "m")
    run = Run.objects.get()
    assert run.status == "failed"
    assert ModelCall.objects.get().http_status == 400


def test_bad_arguments_are_refused_and_write_nothing() -> None:
    with pytest.raises(CommandError, match="unknown tool"):
        chat("hi", "--tool", "nope")
    with pytest.raises(CommandError, match="max_event_loops"):
        chat("hi", "--max-event-loops", "0")
    with pytest.raises(CommandError, match="No conversation 999"):
        chat("hi", "--conversation", "999")
    with pytest.raises(CommandError, match="No user named 'ghost'"):
        chat("hi", "--user", "ghost")
    with pytest.raises(CommandError, match="empty"):
        chat("   ")
    assert Run.objects.count() == 0 and ToolCall.objects.count() == 0


def test_conversation_of_another_user_is_refused() -> None:
    get_user_model().objects.create(username="grace")
    out, _ = chat("hello", "--json")
    conversation = json.loads(out)["conversation"]
    with pytest.raises(CommandError, match="does not belong to 'grace'"):
        chat("hi", "--conversation", str(conversation), "--user", "grace")


ENVIRONMENT_KEY = "sk-environment-canary-91c2"


def test_another_base_url_gets_no_key_unless_one_is_given(
    fake_openai: FakeOpenAIServer, settings: LazySettings
) -> None:
    """OPENAI_API_KEY belongs to OPENAI_BASE_URL: another host never receives it unasked."""
    settings.OPENAI_BASE_URL = "http://provider.invalid/v1"
    settings.OPENAI_API_KEY = ENVIRONMENT_KEY
    fake_openai.enqueue(text_turn("one"), text_turn("two"))
    base = ["--base-url", fake_openai.base_url, "--model", "m"]

    out, err = chat("hi", *base)
    chat("again", *base, "--api-key", "sk-given")

    first, second = fake_openai.requests
    assert first.headers.get("authorization") is None
    assert second.headers["authorization"] == "Bearer sk-given"
    assert "no key sent" in err and "--api-key" in err
    assert ENVIRONMENT_KEY not in out + err


def test_the_environment_url_gets_the_environment_key(
    fake_openai: FakeOpenAIServer, settings: LazySettings
) -> None:
    settings.OPENAI_BASE_URL = fake_openai.base_url
    settings.OPENAI_API_KEY = ENVIRONMENT_KEY
    fake_openai.enqueue(text_turn("one"), text_turn("two"))

    chat("hi", "--model", "m")
    _, err = chat("again", "--base-url", fake_openai.base_url + "/", "--model", "m")

    assert "no key sent" not in err
    assert [r.headers["authorization"] for r in fake_openai.requests] == [
        f"Bearer {ENVIRONMENT_KEY}"
    ] * 2


def test_a_conversation_on_a_profile_naming_a_server_secret_is_refused(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_KEY", ENVIRONMENT_KEY)
    fake_openai.enqueue(text_turn("leaked"))
    conversation = Conversation.objects.create(
        owner=get_user_model().objects.create(username="cli"),
        profile=ProviderProfile.objects.create(
            name="evil", base_url=fake_openai.base_url, model="m", api_key_env="SECRET_KEY"
        ),
    )

    with pytest.raises(CommandError, match="names a key variable the server does not allow"):
        chat("hi", "--conversation", str(conversation.pk))
    assert fake_openai.requests == [] and Run.objects.count() == 0


def test_a_tool_not_available_here_stays_in_the_conversations_settings(
    fake_openai: FakeOpenAIServer,
) -> None:
    """It used to be dropped from the stored settings for good by the next terminal turn."""
    owner = get_user_model().objects.create_user("ada")
    conversation = Conversation.objects.create(
        owner=owner, parameters={"enabled_tools": ["get_current_time", "module_tool"]}
    )
    fake_openai.enqueue(text_turn("Hello."))

    chat("hi", "--conversation", str(conversation.pk), "--base-url", fake_openai.base_url,
         "--model", "fake-model")  # fmt: skip

    conversation.refresh_from_db()
    assert conversation.parameters["enabled_tools"] == ["get_current_time", "module_tool"]
    offered = [tool["function"]["name"] for tool in fake_openai.requests[-1].body["tools"]]
    assert offered == ["get_current_time"]


def test_a_failing_provider_is_retried_as_progress_and_its_reason_said_once(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.enqueue(*[error(500, "upstream is down")] * 3)
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError, match="HTTP 500: upstream is down") as refused:
        call_command(
            "chat", "hi", "--base-url", fake_openai.base_url, "--model", "m",
            stdout=out, stderr=err,
        )  # fmt: skip
    progress = err.getvalue().splitlines()
    assert [line.split(" in ")[0] for line in progress] == [
        "… retrying (1 of 2)",
        "… retrying (2 of 2)",
    ]
    said = out.getvalue() + err.getvalue() + str(refused.value)
    assert said.count("upstream is down") == 1
