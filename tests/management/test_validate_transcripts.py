"""Tests of manage.py validate_transcripts."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from chat import transcripts
from chat.agent import ChatMessage, history
from chat.models import Conversation, HistoryRepair, Run
from chat.testing import factories as make

pytestmark = pytest.mark.django_db

REPLY_A = ChatMessage(role="tool", tool_call_id="a", content="{}")


def stored(*messages: ChatMessage) -> Conversation:
    conversation = make.conversation(make.user("ada"))
    transcripts.append_messages(conversation, messages)
    return conversation


def asking(*ids: str, name: str = "get_current_time") -> ChatMessage:
    return ChatMessage(role="assistant", tool_calls=tuple(make.call(id, name) for id in ids))


def validate(*args: str) -> str:
    out = StringIO()
    call_command("validate_transcripts", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def failing(*args: str) -> tuple[str, str]:
    out = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("validate_transcripts", *args, stdout=out, stderr=StringIO())
    return out.getvalue(), str(raised.value)


def broken() -> Conversation:
    """A dangling call (b) and an orphan tool reply (z), as a crash or a hand edit leaves."""
    return stored(
        ChatMessage(role="user", content="q"),
        asking("a", "b"),
        REPLY_A,
        ChatMessage(role="tool", tool_call_id="z", content="orphan"),
        ChatMessage(role="assistant", content="done"),
    )


def test_reports_every_violation_and_changes_nothing() -> None:
    valid = stored(ChatMessage(role="user", content="hi"), ChatMessage(role="assistant"))
    bad = broken()

    out, error = failing()

    assert f"conversation {bad.pk} message 1: unanswered_tool_call: tool call 'b'" in out
    assert f"conversation {bad.pk} message 3: orphan_tool_message: tool_call_id 'z'" in out
    assert f"conversation {valid.pk} " not in out
    assert "Checked 2 conversation(s): 2 violation(s) in 1 conversation(s); 2 left." in out
    assert "run with --fix" in error
    assert len(transcripts.load_history(bad)) == 5
    assert not HistoryRepair.objects.exists()


def test_fix_repairs_and_records_what_it_changed() -> None:
    bad = broken()

    out = validate("--fix")

    assert f"conversation {bad.pk}: fixed: added 1 tool reply(ies), removed 1 message(s)" in out
    assert out.rstrip().endswith("2 violation(s) in 1 conversation(s); fixed 2.")
    messages = transcripts.load_history(bad)
    assert history.validate(messages) == []
    assert [m.tool_call_id for m in messages if m.role == "tool"] == ["a", "b"]
    repair = HistoryRepair.objects.get(conversation=bad)
    assert repair.reason == "validate_transcripts --fix"
    assert [m["tool_call_id"] for m in repair.added] == ["b"]
    assert [m["content"] for m in repair.removed] == ["orphan"]
    assert validate().rstrip() == "Checked 1 conversation(s): 0 violation(s)."


def test_unfixable_rules_are_reported_as_such() -> None:
    bad = stored(
        ChatMessage(role="user", content="q"),
        asking("a"),
        REPLY_A,
        asking("a"),
        REPLY_A,
        asking("c", name=""),
        ChatMessage(role="tool", tool_call_id="c", content="{}"),
    )

    out, error = failing("--fix")

    assert f"conversation {bad.pk} message 3: duplicate_tool_call_id:" in out
    assert "(cannot be fixed)" in out
    assert f"conversation {bad.pk} message 5: empty_tool_call_name:" in out
    assert f"conversation {bad.pk}: not changed; 2 violation(s) cannot be fixed" in out
    assert "left." in error
    rules = {v.rule for v in transcripts.validate_conversation(bad)}
    assert rules <= history.UNFIXABLE_RULES and rules


def test_a_run_in_progress_is_neither_a_violation_nor_fixed() -> None:
    live = stored(ChatMessage(role="user", content="q"), asking("a"))
    Run.objects.create(conversation=live, status="in_progress")
    messy = stored(ChatMessage(role="tool", tool_call_id="x", content="?"), asking("p"))
    Run.objects.create(conversation=messy, status="in_progress")

    out, _ = failing("--fix")

    assert f"conversation {live.pk} " not in out
    assert f"conversation {messy.pk} message 0: orphan_tool_message" in out
    assert f"conversation {messy.pk}: not fixed: a run is in progress" in out
    assert len(transcripts.load_history(messy)) == 2
    assert not HistoryRepair.objects.exists()


def test_one_conversation_and_an_unknown_one() -> None:
    bad = broken()
    good = stored(ChatMessage(role="user", content="hi"))

    assert "Checked 1 conversation(s): 0 violation(s)." in validate("--conversation", str(good.pk))
    out, _ = failing("--conversation", str(bad.pk))
    assert "Checked 1 conversation(s): 2 violation(s)" in out
    with pytest.raises(CommandError, match="No conversation 999"):
        validate("--conversation", "999")
