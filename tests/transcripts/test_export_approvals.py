"""Exports with decisions: a full record carries each tool call's approval, an import restores
it (the decider by username, or the name alone when nobody here has it), a waiting run stays
waiting, and the bounds hold for the imported text."""

from __future__ import annotations

import json
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import CommandError, call_command

from chat.models import Conversation, Run, ToolCall
from chat.testing import approvals as flow
from chat.testing import factories as make
from chat.testing.openai_script import tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.transcripts.limits import MAX_TEXT_CHARS
from tests.transcripts.test_import_hostile import assert_one_line, import_between

pytestmark = pytest.mark.django_db(transaction=True)

DECISION = (
    "call_id",
    "policy",
    "approval",
    "asked_at",
    "decided_at",
    "decided_by",
    "edited_arguments",
    "decision_reason",
)


def run(command: str, *args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(command, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def full(conversation: Conversation) -> dict[str, Any]:
    out, _ = run("export_transcripts", "--format", "full", "--conversation", str(conversation.pk))
    record: dict[str, Any] = json.loads(out)
    return record


def decisions(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {key: call[key] for key in DECISION} for row in record["runs"] for call in row["tool_calls"]
    ]


def imported(tmp_path: Path, record: dict[str, Any], *args: str) -> tuple[Conversation, str]:
    path = tmp_path / "decided.jsonl"
    path.write_text(json.dumps(record) + "\n")
    before = set(Conversation.objects.values_list("pk", flat=True))
    out, err = run("import_transcripts", str(path), *args)
    assert "Imported 1 conversation(s)" in out, err
    return Conversation.objects.exclude(pk__in=before).get(), err


@pytest.fixture
def decided(fake_openai: FakeOpenAIServer) -> Conversation:
    return flow.conversation_with_decisions(fake_openai, make.user("ada"), waited=180)


def test_an_export_carries_every_decision_and_an_import_restores_it(
    tmp_path: Path, decided: Conversation
) -> None:
    record = full(decided)
    by_id = {d["call_id"]: d for d in decisions(record)}
    assert by_id["a"]["approval"] == "approved" and by_id["a"]["decided_by"] == "ada"
    assert by_id["b"]["decision_reason"] == flow.REASON and by_id["b"]["policy"] == "ask"
    assert by_id["e"]["edited_arguments"] == flow.EDITED
    assert by_id["t"]["policy"] == "run" and by_id["t"]["approval"] == ""
    assert by_id["s"]["policy"] == "never" and by_id["s"]["decided_by"] is None
    assert by_id["a"]["asked_at"] < by_id["a"]["decided_at"]

    copy, err = imported(tmp_path, record)

    assert err == ""
    again = full(copy)
    assert {k: v for k, v in again.items() if k != "id"} == {
        k: v for k, v in record.items() if k != "id"
    }
    edited = ToolCall.objects.select_related("decided_by").get(run__conversation=copy, call_id="e")
    assert (edited.decided_by, edited.arguments) == (decided.owner, flow.NOTE)
    assert edited.run_arguments == flow.EDITED


def test_a_decider_nobody_here_is_kept_by_name_and_the_reader_is_told(
    tmp_path: Path, decided: Conversation
) -> None:
    record = full(decided)
    for row in record["runs"]:
        for call in row["tool_calls"]:
            if call["decided_by"]:
                call["decided_by"] = "grace"

    copy, err = imported(tmp_path, record)

    assert "decisions by grace are kept with the name only: no user of that name here" in err
    call = ToolCall.objects.get(run__conversation=copy, call_id="b")
    assert (call.decided_by, call.decided_by_name, call.decider) == (None, "grace", "grace")
    assert decisions(full(copy)) == decisions(record)  # exported again as it came


def test_an_import_by_another_owner_keeps_the_decisions_their_decider_made(
    tmp_path: Path, decided: Conversation
) -> None:
    bob = make.user("bob")
    copy, _ = imported(tmp_path, full(decided), "--user", "bob")
    assert copy.owner == bob
    call = ToolCall.objects.select_related("decided_by").get(run__conversation=copy, call_id="a")
    assert call.decided_by == decided.owner  # ada approved it, not bob


def test_a_waiting_run_exports_and_imports_still_waiting(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    made = flow.on_provider(fake_openai, make.user("ada"), "handoff_note")
    fake_openai.enqueue(tool_turn([("h", "handoff_note", flow.NOTE)]))
    waiting = async_to_sync(flow.waiting)(made)
    record = full(made)
    assert record["runs"][0]["status"] == "requires_action"
    assert decisions(record)[0]["approval"] == "waiting"
    err = StringIO()
    with pytest.raises(CommandError, match="1 conversation"):
        call_command("export_transcripts", "--conversation", str(made.pk), stderr=err)
    assert "left out: a run is in progress" in err.getvalue()

    copy, err = imported(tmp_path, record)

    assert err == ""  # its last calls are waiting for a decision: no broken history
    copied = Run.objects.get(conversation=copy)
    assert (copied.status, copied.waiting_until) == ("requires_action", waiting.waiting_until)
    assert ToolCall.objects.get(run=copied).is_waiting
    out, _ = run("validate_transcripts", "--conversation", str(copy.pk))
    assert "0 violation(s)" in out
    second = {**record["runs"][0], "tool_calls": [], "status": "in_progress"}
    record["runs"].append(second)
    Conversation.objects.all().delete()
    _, err = import_between(tmp_path, json.dumps(record))
    assert_one_line(err, "more than one run in progress or waiting for approval")


EDITS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "a reason too long": (
        lambda call: call.update(decision_reason="x" * (MAX_TEXT_CHARS + 1)),
        "decision_reason: 1,000,001 characters, more than the 1,000,000 allowed",
    ),
    "edited arguments too long": (
        lambda call: call.update(edited_arguments="x" * (MAX_TEXT_CHARS + 1)),
        "edited_arguments: 1,000,001 characters",
    ),
    "a decider's name too long": (
        lambda call: call.update(decided_by="x" * 201),
        "decided_by: 201 characters, more than the 200 allowed",
    ),
    "an unknown approval": (
        lambda call: call.update(approval="maybe"),
        "approval.str-enum[Approval]: Input should be 'waiting', 'approved'",
    ),
    "an unknown policy": (
        lambda call: call.update(policy="sometimes"),
        "policy.str-enum[Policy]: Input should be 'run', 'ask' or 'never'",
    ),
}


@pytest.mark.parametrize(("edit", "reason"), EDITS.values(), ids=EDITS.keys())
def test_a_hostile_decision_costs_one_line(
    tmp_path: Path,
    decided: Conversation,
    edit: Callable[[dict[str, Any]], None],
    reason: str,
) -> None:
    record = full(decided)
    Conversation.objects.all().delete()
    edit(record["runs"][0]["tool_calls"][0])

    _, err = import_between(tmp_path, json.dumps(record))

    assert_one_line(err, f"runs.0: tool_calls.0.{reason}")
    assert not Run.objects.exists() and not ToolCall.objects.exists()
