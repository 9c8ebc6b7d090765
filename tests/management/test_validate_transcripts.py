"""Tests of manage.py validate_transcripts."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from chat import transcripts
from chat.agent import ChatMessage, history
from chat.models import Conversation, HistoryRepair, Message, Run, Version
from chat.testing import factories as make
from chat.transcripts import versions

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


def archived(conversation: Conversation, index: int, *continuation: ChatMessage) -> Version:
    """Archive the active path from `index` on, continuing it with `continuation`."""
    with transaction.atomic():
        version = versions.archive_from(conversation, index)
        transcripts.append_messages(conversation, continuation)
    return version


def rows(conversation: Conversation, version: Version | None) -> list[tuple[int, str, str]]:
    found = conversation.messages.filter(version=version).order_by("index")
    return [(m.index, m.role, m.tool_call_id) for m in found]


def test_an_archived_path_is_reported_and_fixed_without_touching_the_active_one() -> None:
    bad = broken()
    version = archived(bad, 1, ChatMessage(role="assistant", content="fine"))
    active = list(bad.messages.active().values_list("pk", "index", "content"))

    out, _ = failing()

    where = f"conversation {bad.pk} version 1 from message 1"
    assert f"{where}, message 1: unanswered_tool_call: tool call 'b'" in out
    assert f"{where}, message 3: orphan_tool_message: tool_call_id 'z'" in out
    assert f"conversation {bad.pk} message" not in out

    out = validate("--fix")

    assert f"{where}: fixed: added 1 tool reply(ies), removed 1 message(s)" in out
    assert out.rstrip().endswith("2 violation(s) in 1 conversation(s); fixed 2.")
    assert rows(bad, version) == [
        (1, "assistant", ""),
        (2, "tool", "a"),
        (3, "tool", "b"),
        (4, "assistant", ""),
    ]
    assert list(bad.messages.active().values_list("pk", "index", "content")) == active
    for path in versions.paths(bad):
        assert history.validate(transcripts.to_chat_messages(path.messages)) == []
    repair = HistoryRepair.objects.get(conversation=bad)
    assert repair.reason == "validate_transcripts --fix (version 1 from message 1)"
    assert [m["index"] for m in repair.added] == [3]
    assert validate().rstrip() == "Checked 1 conversation(s): 0 violation(s)."


def test_a_version_is_fixed_in_its_own_rows_when_the_break_is_where_it_starts() -> None:
    """The version starts right after a call its parent answers: the reply goes first in the
    version, the active path keeps every row."""
    made = stored(
        ChatMessage(role="user", content="q"),
        asking("a"),
        REPLY_A,
        ChatMessage(role="assistant", content="done"),
    )
    version = archived(made, 2, REPLY_A, ChatMessage(role="assistant", content="again"))
    Message.objects.filter(version=version, role="tool").delete()
    Message.objects.filter(version=version).update(index=2)
    before = list(made.messages.active().values_list("pk", "index"))

    out = validate("--fix")

    assert f"conversation {made.pk} version 1 from message 2: fixed: added 1" in out
    assert rows(made, version) == [(2, "tool", "a"), (3, "assistant", "")]
    added = Message.objects.get(version=version, index=2)
    assert added.run_id is None and "validate_transcripts --fix" in (added.content or "")
    assert list(made.messages.active().values_list("pk", "index")) == before
