"""Tests of chat.transcripts.rows: Message rows <-> ChatMessage values, appends and repairs."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from chat import agent, transcripts
from chat.models import HistoryRepair, Message, Run
from chat.testing import factories as make

pytestmark = pytest.mark.django_db


def call(call_id: str, name: str = "get_current_time") -> agent.ToolCall:
    return agent.ToolCall(id=call_id, name=name, arguments='{"timezone": "UTC"}')


def test_values_survive_a_round_trip_through_rows() -> None:
    made = make.conversation(make.user(), "round trip")
    values = [
        agent.ChatMessage(role="user", content="time?"),
        agent.ChatMessage(
            role="assistant", content=None, reasoning="think", tool_calls=(call("a"),)
        ),
        agent.ChatMessage(role="tool", tool_call_id="a", content='{"iso": "now"}'),
        agent.ChatMessage(role="assistant", content=""),
    ]
    rows = transcripts.append_messages(made, values)
    assert [row.index for row in rows] == [0, 1, 2, 3]
    assert transcripts.load_history(made) == values
    stored = Message.objects.get(conversation=made, index=3)
    assert stored.content == ""  # "" and null differ on the wire, and stay apart


def test_append_continues_after_the_last_index() -> None:
    made = make.conversation(make.user(), "append")
    transcripts.append_messages(made, [agent.ChatMessage(role="user", content="one")])
    run = Run.objects.create(conversation=made)
    (row,) = transcripts.append_messages(
        made, [agent.ChatMessage(role="assistant", content="two")], run=run
    )
    assert (row.index, row.run_id) == (1, run.pk)
    assert transcripts.next_index(made) == 2


def test_repair_answers_dangling_calls_drops_orphans_and_records_it() -> None:
    made = make.conversation(make.user(), "broken")
    run = Run.objects.create(conversation=made)
    transcripts.append_messages(
        made,
        [
            agent.ChatMessage(role="user", content="time?"),
            agent.ChatMessage(role="tool", tool_call_id="ghost", content="orphan"),
            agent.ChatMessage(role="assistant", tool_calls=(call("a"), call("b"))),
            agent.ChatMessage(role="tool", tool_call_id="a", content="{}"),
        ],
        run=run,
    )
    assert transcripts.validate_conversation(made)

    added, removed = transcripts.repair_conversation(made, reason="Cancelled by the user", run=run)

    assert (added, removed) == (1, 1)
    assert transcripts.validate_conversation(made) == []
    history = transcripts.load_history(made)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool"]
    answer = json.loads(history[-1].content or "")
    assert answer == {"error": "Cancelled by the user: get_current_time was not run to the end"}
    assert list(Message.objects.filter(conversation=made).values_list("index", flat=True)) == [
        0,
        1,
        2,
        3,
    ]
    repair = HistoryRepair.objects.get(conversation=made)
    assert (repair.reason, repair.run_id) == ("Cancelled by the user", run.pk)
    assert [entry["tool_call_id"] for entry in repair.added] == ["b"]
    assert [entry["content"] for entry in repair.removed] == ["orphan"]
    assert transcripts.repair_conversation(made, reason="again") == (0, 0)


def test_create_as_recorded_keeps_the_creation_times() -> None:
    made = make.conversation(make.user(), "copied")
    then = make.T0 - timedelta(days=30)
    rows = [
        Message(conversation=made, index=position, role="user", content="x", created_at=then)
        for position in range(3)
    ]
    created = transcripts.create_as_recorded(Message, rows, "created_at")
    assert [row.created_at for row in created] == [then] * 3
    assert set(Message.objects.filter(conversation=made).values_list("created_at", flat=True)) == {
        then
    }
