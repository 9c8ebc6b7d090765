"""manage.py chat and tool calls that wait for approval: the terminal's question for each call
(approve, deny with a reason, edit until the arguments fit, always allow), no terminal denying,
--approve TOOL and --approve-all; the run goes on in the command's process, and the strict
provider sees a valid history after each outcome."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from chat.agent import history
from chat.agent.approvals import DENIED
from chat.management.approvals import NO_TERMINAL, QUESTION
from chat.models import Conversation, Run, ToolCall
from chat.testing import factories as make
from chat.testing.openai_script import text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.transcripts import load_history

pytestmark = pytest.mark.django_db(transaction=True)

NOTE = '{"note": "ship it"}'


class Terminal:
    """stdin as a terminal would be."""

    def isatty(self) -> bool:
        return True


def typing(monkeypatch: pytest.MonkeyPatch, *lines: str | type[BaseException]) -> list[str]:
    """A terminal at which these lines are typed, in order (an exception class: raised at that
    point, as Ctrl-D or Ctrl-C would); what is left untyped, to check all were asked for."""
    left = list(lines)

    def read() -> str:
        assert left, "asked once more than expected"
        line = left.pop(0)
        if isinstance(line, type):
            raise line()
        return line

    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("builtins.input", read)
    return left  # type: ignore[return-value]


def no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    def never() -> str:
        raise AssertionError("asked without a terminal")

    monkeypatch.setattr("builtins.input", never)


def chat(fake: FakeOpenAIServer, *args: str, tools: tuple[str, ...] = ("handoff_note",)) -> str:
    out, err = StringIO(), StringIO()
    enabled = [flag for name in tools for flag in ("--tool", name)]
    base = ["--base-url", fake.base_url, "--model", "m-1"]
    call_command("chat", "hand it off", *enabled, *base, *args, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def tool_replies(fake: FakeOpenAIServer, request: int) -> dict[str, str]:
    messages = fake.requests[request].body["messages"]
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


def valid() -> bool:
    return history.validate(load_history(Conversation.objects.get())) == []


@pytest.fixture
def one_note(fake_openai: FakeOpenAIServer) -> FakeOpenAIServer:
    fake_openai.enqueue(tool_turn([("h", "handoff_note", NOTE)]), text_turn("Done."))
    return fake_openai


def test_yes_approves_and_the_run_goes_on_here(
    one_note: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    left = typing(monkeypatch, "y")

    out = chat(one_note)

    assert left == []
    assert "Handoff note (handoff_note · built-in) waits for your approval" in out
    assert '{\n  "note": "ship it"\n}' in out and QUESTION in out
    assert "→ Handoff note" in out and "✓ Handoff note" in out and "Done." in out
    assert "completed" in out
    call = ToolCall.objects.select_related("decided_by").get()
    assert (call.approval, call.status, call.decided_by.username) == (
        "approved",
        "completed",
        "cli",
    )
    assert json.loads(tool_replies(one_note, 1)["h"])["note"] == "ship it"
    assert valid()


def test_no_asks_for_a_reason_the_model_reads(
    one_note: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    typing(monkeypatch, "maybe", "n", "not before Friday")

    out = chat(one_note)

    assert "Answer y (approve), n (deny), e (edit) or a (always allow)." in out
    assert tool_replies(one_note, 1) == {"h": f"{DENIED}: not before Friday"}
    call = ToolCall.objects.get()
    assert (call.approval, call.decision_reason) == ("denied", "not before Friday")
    assert Run.objects.get().status == "completed" and valid()


def test_edit_refuses_arguments_that_do_not_fit_and_asks_again(
    one_note: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    edited = '{"note": "ship it on Friday", "recipient": "ops"}'
    typing(monkeypatch, "e", "{not json", '{"note": ""}', edited)

    out = chat(one_note)

    assert "The arguments are not valid JSON" in out
    assert "The arguments do not fit the tool's schema at note:" in out
    call = ToolCall.objects.get()
    assert (call.approval, call.arguments, call.edited_arguments) == ("edited", NOTE, edited)
    assert json.loads(call.result)["recipient"] == "ops"
    sent = one_note.requests[1].body["messages"]
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == edited
    assert valid()


def test_an_empty_edit_goes_back_to_the_question(
    one_note: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    left = typing(monkeypatch, "e", "", "y")

    chat(one_note)

    assert left == [] and ToolCall.objects.get().approval == "approved"


def test_always_allows_the_tool_for_its_other_calls_and_the_conversation(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.enqueue(
        tool_turn([("a", "handoff_note", NOTE), ("b", "handoff_note", NOTE)]),
        text_turn("Both."),
    )
    left = typing(monkeypatch, "a")  # the second call is not asked for

    chat(fake_openai)

    assert left == []
    assert [call.approval for call in ToolCall.objects.all()] == ["always", "always"]
    assert Conversation.objects.get().always_allowed == ["handoff_note"]
    assert set(tool_replies(fake_openai, 1)) == {"a", "b"} and valid()


def test_without_a_terminal_a_waiting_call_is_denied(
    one_note: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_terminal(monkeypatch)

    out = chat(one_note)

    assert f"denied, {NO_TERMINAL}" in out and "--approve handoff_note" in out
    assert tool_replies(one_note, 1) == {"h": f"{DENIED}: {NO_TERMINAL}"}
    assert ToolCall.objects.get().approval == "denied" and valid()


def test_the_terminal_closing_denies_the_call_asked_and_those_after(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.enqueue(
        tool_turn([("a", "handoff_note", NOTE), ("b", "handoff_note", NOTE)]),
        text_turn("Neither."),
    )
    typing(monkeypatch, EOFError)

    chat(fake_openai)

    assert tool_replies(fake_openai, 1) == {
        "a": f"{DENIED}: {NO_TERMINAL}",
        "b": f"{DENIED}: {NO_TERMINAL}",
    }
    assert valid()


@pytest.mark.parametrize(
    ("flags", "approved"),
    [
        (["--approve", "handoff_note"], {"h": "approved", "t": ""}),
        (["--approve", "get_current_time"], {"h": "denied", "t": ""}),
        (["--approve-all"], {"h": "approved", "t": ""}),
    ],
)
def test_approve_flags_decide_without_asking(
    fake_openai: FakeOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    approved: dict[str, str],
) -> None:
    fake_openai.enqueue(
        tool_turn([("h", "handoff_note", NOTE), ("t", "get_current_time", "{}")]),
        text_turn("Done."),
    )
    no_terminal(monkeypatch)

    out = chat(fake_openai, *flags, tools=("handoff_note", "get_current_time"))

    assert {c.call_id: c.approval for c in ToolCall.objects.all()} == approved
    if approved["h"] == "approved":
        assert f"approved by {flags[0]}" in out
    assert set(tool_replies(fake_openai, 1)) == {"h", "t"} and valid()


def test_a_flag_approves_its_tool_and_the_terminal_is_asked_for_the_others(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = make.conversation(
        make.user("cli"),
        enabled_tools=["handoff_note", "search_cards"],
        tool_policies={"search_cards": "ask"},
    )
    fake_openai.enqueue(
        tool_turn([("h", "handoff_note", NOTE), ("s", "search_cards", '{"query": "x"}')]),
        text_turn("One of two."),
    )
    typing(monkeypatch, "n", "")

    out = chat(fake_openai, "--approve", "handoff_note", "--conversation", str(made.pk), tools=())

    assert out.count(QUESTION) == 1 and "Search cards (search_cards · built-in)" in out
    assert {c.call_id: c.approval for c in ToolCall.objects.all()} == {
        "h": "approved",
        "s": "denied",
    }
    assert tool_replies(fake_openai, 1)["s"] == f"{DENIED}."
    assert valid()


def test_json_asks_on_stderr_and_prints_the_decisions(
    one_note: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    typing(monkeypatch, "n", "no")
    out, err = StringIO(), StringIO()

    call_command(
        "chat", "hand it off", "--tool", "handoff_note", "--base-url", one_note.base_url,
        "--model", "m-1", "--json", stdout=out, stderr=err,
    )  # fmt: skip

    assert QUESTION in err.getvalue()
    summary = json.loads(out.getvalue())
    assert summary["status"] == "completed"
    (call,) = summary["tool_calls"]
    assert (call["approval"], call["decision_reason"]) == ("denied", "no")


def test_a_model_that_asks_again_is_asked_about_again(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.enqueue(
        tool_turn([("a", "handoff_note", NOTE)]),
        tool_turn([("b", "handoff_note", '{"note": "and again"}')]),
        text_turn("Twice."),
    )
    left = typing(monkeypatch, "y", "y")

    out = chat(fake_openai)

    assert left == [] and out.count(QUESTION) == 2
    assert Run.objects.get().status == "completed" and valid()


def test_ctrl_c_leaves_the_call_waiting_and_says_how_to_decide_it(
    one_note: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    typing(monkeypatch, KeyboardInterrupt)

    with pytest.raises(CommandError, match=r"waits for a decision.*runs decide \d+ --approve"):
        chat(one_note)

    assert Run.objects.get().status == "requires_action"
    assert ToolCall.objects.get().approval == "waiting"
