"""Tests of manage.py chat: one user turn from the terminal, through the web's run path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO

import pytest
from django.conf import LazySettings
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from chat.agent import history
from chat.models import Conversation, ModelCall, ProviderProfile, Run, ToolCall, Version
from chat.testing import factories as make
from chat.testing.mcp_server import McpHttpServer
from chat.testing.openai_script import MODEL, error, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.transcripts import load_history

pytestmark = pytest.mark.django_db(transaction=True)


def chat(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("chat", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_scripted_turn_streams_tools_and_usage() -> None:
    out, _ = chat(
        "What time is it in Europe/Paris? Leave a handoff note too.",
        "--all-tools",
        "--approve",
        "handoff_note",
    )

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
    with pytest.raises(CommandError, match="as 'grace': This conversation is not yours"):
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


def active_texts(conversation_id: int) -> list[tuple[str, str | None]]:
    conversation = Conversation.objects.get(pk=conversation_id)
    return [(m.role, m.content) for m in conversation.messages.active()]


def test_edit_and_regenerate_make_versions(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(text_turn("Hi."), text_turn("Hello, edited."), text_turn("Hello again."))
    base = ["--base-url", fake_openai.base_url, "--model", "m"]
    out, _ = chat("hello", *base, "--json")
    conversation = str(json.loads(out)["conversation"])

    out, _ = chat("hello, edited", "--conversation", conversation, "--edit", "0", *base, "--json")

    assert json.loads(out)["version"] == {"index": 0, "number": 2, "total": 2}
    assert active_texts(int(conversation)) == [
        ("user", "hello, edited"),
        ("assistant", "Hello, edited."),
    ]
    (first,) = Version.objects.filter(conversation_id=conversation)
    assert (first.index, first.number) == (0, 1)
    assert [m.content for m in first.messages.order_by("index")] == ["hello", "Hi."]

    out, _ = chat("--conversation", conversation, "--regenerate", *base)

    assert "version 3 of 3 from message 0" in out and "Hello again." in out
    assert active_texts(int(conversation)) == [
        ("user", "hello, edited"),
        ("assistant", "Hello again."),
    ]
    assert Version.objects.filter(conversation_id=conversation).count() == 2
    sent = [m["content"] for m in fake_openai.requests[-1].body["messages"]]
    assert sent == ["hello, edited"]


def test_version_options_are_refused_with_one_clear_line() -> None:
    out, _ = chat("hello", "--json")
    conversation = str(json.loads(out)["conversation"])
    refusals = [
        (["new", "--conversation", conversation, "--edit", "1"], "Message 1 is not a user message"),
        (["new", "--conversation", conversation, "--edit", "7"], "There is no message 7"),
        (["new", "--edit", "0"], "--edit makes a version of a conversation: give --conversation"),
        (["--regenerate"], "--regenerate makes a version of a conversation"),
        (["new", "--conversation", conversation, "--edit", "0", "--regenerate"], "exclude each"),
        (["again", "--conversation", conversation, "--regenerate"], "give no message"),
        (["--conversation", conversation, "--edit", "0"], "--edit N needs the new text"),
        (["--conversation", conversation], "Give the message to send"),
    ]
    for args, reason in refusals:
        with pytest.raises(CommandError) as refused:
            chat(*args)
        assert reason in str(refused.value) and "\n" not in str(refused.value), args
    assert Run.objects.count() == 1 and not Version.objects.exists()
    assert len(active_texts(int(conversation))) == 2


# Starting from an agent ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def docs_http() -> Iterator[McpHttpServer]:
    with McpHttpServer("docs") as server:
        yield server


def support_agent(endpoint: ProviderProfile) -> None:
    """Ada's team agent Support: v1 (published) with a prompt, a pre-message, a built-in and an
    MCP tool, on `endpoint`; v2 (a draft) with another prompt and the docs server whole. Her
    conversation then changes again: nothing of it may reach a conversation started from one."""
    ada = make.user("ada")
    made = make.conversation(
        ada,
        "settings",
        system_prompts=["You answer for the support team.", "Be brief."],
        pre_messages=[{"role": "assistant", "content": "How can I help?"}],
    )
    made.profile = endpoint
    made.parameters = {
        **made.parameters,
        "enabled_tools": ["get_current_time", "docs__search_docs"],
        "temperature": 0.3,
    }
    made.save()
    call_command("agents", "create", "Support", "--from-conversation", str(made.pk), "--team",
                 "--user", "ada", stdout=StringIO())  # fmt: skip
    made.parameters = {"system_prompts": ["Cite the docs."], "enabled_tools": ["docs__*"]}
    made.save()
    call_command("agents", "version", "Support", "--from-conversation", str(made.pk),
                 "--user", "ada", stdout=StringIO())  # fmt: skip
    made.parameters = {"system_prompts": ["Ada's later prompt."]}
    made.save()


def test_agent_starts_a_conversation_the_provider_sees_as_that_version(
    docs_http: McpHttpServer, fake_openai: FakeOpenAIServer
) -> None:
    call_command("mcp", "add", "docs", "--url", docs_http.url, stdout=StringIO())
    support_agent(
        ProviderProfile.objects.create(
            name="local", base_url=fake_openai.base_url, model=MODEL, available_to_everyone=True
        )
    )
    fake_openai.enqueue(text_turn("Hello."), text_turn("Hello again."))

    published = json.loads(chat("Hi", "--agent", "Support", "--json")[0])
    draft = json.loads(chat("Hi", "--agent", "Support@2", "--json")[0])

    assert (published["agent"], draft["agent"]) == (
        {"name": "Support", "version": 1},
        {"name": "Support", "version": 2},
    )
    first, second = (request.body for request in fake_openai.requests)
    assert first["messages"] == [
        {"role": "system", "content": "You answer for the support team."},
        {"role": "system", "content": "Be brief."},
        {"role": "assistant", "content": "How can I help?"},
        {"role": "user", "content": "Hi"},
    ]
    assert first["model"] == MODEL and first["temperature"] == 0.3
    assert [tool["function"]["name"] for tool in first["tools"]] == [
        "get_current_time",
        "docs__search_docs",
    ]
    assert second["messages"] == [
        {"role": "system", "content": "Cite the docs."},
        {"role": "user", "content": "Hi"},
    ]
    offered = {tool["function"]["name"] for tool in second["tools"]}
    assert {"docs__search_docs", "docs__add"} <= offered and "get_current_time" not in offered
    assert fake_openai.pending == 0  # the strict provider refused nothing
    started = Conversation.objects.get(pk=draft["conversation"])
    assert started.owner.username == "cli" and started.profile is not None
    assert str(started.agent_version) == "Support v2" and started.changed_from() is None


def test_agent_default_is_the_servers_own_settings() -> None:
    result = json.loads(chat("what time is it?", "--agent", "Default", "--json")[0])

    assert result["agent"] == {"name": "Default", "version": None}
    assert result["status"] == "completed" and result["tool_calls"][0]["name"] == "get_current_time"
    assert Conversation.objects.get().agent_version is None


@pytest.mark.parametrize(
    "options",
    [
        ["--conversation", "1"],
        ["--tool", "get_current_time"],
        ["--all-tools"],
        ["--system", "Be rude."],
        ["--model", "other"],
        ["--temperature", "0"],
        ["--max-event-loops", "2"],
        ["--base-url", "http://127.0.0.1:9/v1"],
        ["--conversation", "1", "--edit", "0"],
    ],
)
def test_agent_with_an_option_that_would_contradict_it_is_refused(options: list[str]) -> None:
    with pytest.raises(CommandError) as refused:
        chat("hi", "--agent", "Support", *options)

    said = str(refused.value)
    assert said.startswith("--agent starts a new conversation with exactly that version's")
    assert f"leave out {options[0]}" in said and "\n" not in said
    assert not Conversation.objects.exists()


def test_agent_refusals_are_one_line_and_start_nothing(fake_openai: FakeOpenAIServer) -> None:
    ada = make.user("ada")
    make.user("bob")
    mine = make.conversation(ada, "settings", system_prompts=["Private."])
    call_command("agents", "create", "Mine", "--from-conversation", str(mine.pk), "--user", "ada",
                 stdout=StringIO())  # fmt: skip
    refusals = [
        (["--agent", "Nobody"], "No agent named 'Nobody' that you may use."),
        (["--agent", "Mine"], "No agent named 'Mine' that you may use."),
        (["--agent", "Mine", "--user", "bob"], "No agent named 'Mine' that you may use."),
        (["--agent", "Mine@3", "--user", "ada"], "Mine has no version 3 (it has 1 to 1)."),
        (["--agent", "Default@1"], "The built-in Default agent has no numbered versions."),
    ]
    for args, reason in refusals:
        with pytest.raises(CommandError) as refused:
            chat("hi", *args)
        assert str(refused.value) == reason, args
    assert Conversation.objects.count() == 1 and Run.objects.count() == 0
    assert fake_openai.requests == []
