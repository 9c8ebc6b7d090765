"""Tests of versions in export_transcripts and import_transcripts: the openai format's
--all-versions and the full format's version 2 (and version-1 records still importing)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from chat import agent, transcripts
from chat.agent import history
from chat.models import Conversation, Message, Run, ToolCall, Version
from chat.testing import factories as make
from chat.testing.openai_script import validate_request
from chat.transcripts import versions
from tests.transcripts.test_export_import import export, run, without_id

pytestmark = pytest.mark.django_db


def new_version(made: Conversation, index: int, *texts: str) -> Version:
    """Archive the active path from `index` on and continue it with a user/assistant turn."""
    with transaction.atomic():
        version = versions.archive_from(made, index)
        question, answer = texts
        transcripts.append_messages(
            made,
            [
                agent.ChatMessage(role="user", content=question),
                agent.ChatMessage(role="assistant", content=answer),
            ],
        )
    return version


@pytest.fixture
def nested() -> Conversation:
    """The rich conversation edited at its second question, then at its first: the first edit
    now hangs off the version holding the original first turn, tool calls and logs included."""
    made = make.rich_conversation(make.user("ada"))
    new_version(made, 5, "And later?", "Later.")
    new_version(made, 0, "Start over", "Fresh.")
    return made


def test_the_nested_fixture_is_what_the_tests_expect(nested: Conversation) -> None:
    first, second = Version.objects.filter(conversation=nested).order_by("index")
    assert (first.index, first.parent, second.index, second.parent) == (0, None, 5, first)
    asking = ToolCall.objects.get(call_id="call_a").message
    assert asking is not None and asking.version == first


def test_openai_export_is_the_active_path_only(nested: Conversation) -> None:
    (record,) = export()

    assert [m.get("content") for m in record["messages"]] == ["Be brief.", "Start over", "Fresh."]


def test_all_versions_gives_a_strict_valid_line_per_path(nested: Conversation) -> None:
    out, err = run("export_transcripts", "--all-versions")
    lines = [json.loads(line) for line in out.splitlines()]

    assert len(lines) == len(versions.paths(nested)) == 3
    assert "Exported 3 version path(s) (openai format)." in err
    for record in lines:
        assert validate_request({"model": "m", **record}) is None
        values = [agent.ChatMessage.from_openai(m) for m in record["messages"]]
        assert history.validate(values) == []
        assert record["messages"][0] == {"role": "system", "content": "Be brief."}
        assert [t["function"]["name"] for t in record["tools"]] == [
            "get_current_time",
            "handoff_note",
        ]
    active, original, second = (
        [m.get("content") for m in record["messages"] if m["role"] == "user"] for record in lines
    )
    assert active == ["Start over"]
    assert original == ["What time is it? Leave a note <b>too</b>.", "And later?"]
    assert second == ["What time is it? Leave a note <b>too</b>.", "And now?"]


def test_all_versions_leaves_out_a_broken_path_naming_its_version() -> None:
    made = make.conversation(make.user("ada"), "broken version")
    transcripts.append_messages(
        made,
        [
            agent.ChatMessage(role="user", content="q"),
            agent.ChatMessage(role="assistant", tool_calls=(make.call("c1", "get_current_time"),)),
        ],
    )
    new_version(made, 0, "q again", "fine")
    out, err = StringIO(), StringIO()

    with pytest.raises(CommandError, match="1 version path"):
        call_command("export_transcripts", "--all-versions", stdout=out, stderr=err)

    assert len(out.getvalue().splitlines()) == 1
    report = err.getvalue()
    assert (
        f"conversation {made.pk} version 1 from message 0: left out: the history breaks" in report
    )
    assert "unanswered_tool_call" in report
    with pytest.raises(CommandError, match="--all-versions is for the openai format"):
        run("export_transcripts", "--all-versions", "--format", "full")


def test_full_round_trip_keeps_every_version(nested: Conversation, tmp_path: Path) -> None:
    path = tmp_path / "full.jsonl"
    run("export_transcripts", "--format", "full", "--output", str(path))
    (before,) = map(json.loads, path.read_text().splitlines())
    assert before["version"] == 2
    assert before["versions"] == [
        {
            "index": 0,
            "number": 1,
            "parent": None,
            "created_at": before["versions"][0]["created_at"],
        },
        {"index": 5, "number": 1, "parent": 0, "created_at": before["versions"][1]["created_at"]},
    ]
    asking = next(m for m in before["messages"] if m["tool_calls"])
    assert (asking["version"], asking["index"]) == (0, 1)
    calls = before["runs"][0]["tool_calls"]
    assert [(c["message_version"], c["message"]) for c in calls] == [(0, 1), (0, 1)]

    run("import_transcripts", str(path))

    copy = Conversation.objects.exclude(pk=nested.pk).get()
    (after,) = export("--format", "full", "--conversation", str(copy.pk))
    assert without_id(after) == without_id(before)
    inner = Version.objects.get(conversation=copy, index=5)
    assert inner.parent is not None and inner.parent.index == 0
    copied = ToolCall.objects.get(run__conversation=copy, call_id="call_a").message
    assert copied is not None and copied.version == inner.parent and copied.index == 1
    assert [m.content for m in copy.messages.active()] == ["Start over", "Fresh."]
    texts = [[m.content for m in path.messages] for path in versions.paths(copy)]
    assert texts == [[m.content for m in path.messages] for path in versions.paths(nested)]


def test_a_version_1_record_still_imports_with_every_message_active(tmp_path: Path) -> None:
    made = make.rich_conversation(make.user("ada"))
    (current,) = export("--format", "full")
    old = {key: value for key, value in current.items() if key != "versions"}
    old["version"] = 1
    old["messages"] = [{k: v for k, v in m.items() if k != "version"} for m in old["messages"]]
    old["runs"] = [
        {
            **r,
            "tool_calls": [
                {k: v for k, v in c.items() if k != "message_version"} for c in r["tool_calls"]
            ],
        }
        for r in old["runs"]
    ]
    path = tmp_path / "v1.jsonl"
    path.write_text(json.dumps(old) + "\n")

    run("import_transcripts", str(path))

    copy = Conversation.objects.exclude(pk=made.pk).get()
    assert not Version.objects.filter(conversation=copy).exists()
    assert Message.objects.filter(conversation=copy, version__isnull=True).count() == 7
    (again,) = export("--format", "full", "--conversation", str(copy.pk))
    assert without_id(again) == without_id(current)


def broken_lines(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The record with one broken reference each, by what the refusal says."""
    messages, runs, archived = record["messages"], record["runs"], record["versions"]
    first_call = runs[0]["tool_calls"][0]
    return {
        "versions.1: no version 7 (its parent)": {
            **record,
            "versions": [archived[0], {**archived[1], "parent": 7}],
        },
        "versions.0: its parent does not start before it": {
            **record,
            "versions": [{**archived[0], "parent": 1}, archived[1]],
        },
        "versions.9, message 0: no version 9": {
            **record,
            "messages": [{**messages[0], "version": 9}, *messages[1:]],
        },
        "messages: two messages of one path share an index": {
            **record,
            "messages": [messages[0], {**messages[1], "index": 0, "version": None}, *messages[2:]],
        },
        "runs.0: tool call 'call_a': no message": {
            **record,
            "runs": [
                {**runs[0], "tool_calls": [{**first_call, "message_version": 1}]},
                *runs[1:],
            ],
        },
        "versions need format version 2": {**record, "version": 1},
    }


def test_broken_references_are_refused_with_one_clear_line(
    nested: Conversation, tmp_path: Path
) -> None:
    (record,) = export("--format", "full")
    cases = broken_lines(record)
    path = tmp_path / "broken.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in cases.values()))
    err = StringIO()

    with pytest.raises(CommandError, match=f"{len(cases)} line"):
        call_command("import_transcripts", str(path), stdout=StringIO(), stderr=err)

    report = err.getvalue().splitlines()
    assert len(report) == len(cases)
    for number, (line, reason) in enumerate(zip(report, cases, strict=True), start=1):
        assert line.startswith(f"line {number}: ") and reason in line, line
    assert Conversation.objects.count() == 1


def test_import_warns_about_a_broken_archived_path(tmp_path: Path) -> None:
    made = make.conversation(make.user("ada"), "broken version")
    transcripts.append_messages(
        made,
        [
            agent.ChatMessage(role="user", content="q"),
            agent.ChatMessage(role="assistant", tool_calls=(make.call("c1", "get_current_time"),)),
        ],
    )
    new_version(made, 0, "q again", "fine")
    (record,) = export("--format", "full")
    path = tmp_path / "full.jsonl"
    path.write_text(json.dumps(record) + "\n")

    _, err = run("import_transcripts", str(path))

    assert err.startswith("line 1: warning: version 1 from message 0: the history breaks")


def test_full_export_with_versions_runs_a_fixed_number_of_queries(nested: Conversation) -> None:
    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            export("--format", "full")
        return len(queries)

    few = count()
    other = make.rich_conversation(make.user("bob"))
    new_version(other, 5, "Then?", "Then.")
    new_version(other, 5, "Or?", "Or.")
    assert count() == few


def test_a_run_in_progress_holds_back_only_the_active_path(nested: Conversation) -> None:
    Run.objects.create(conversation=nested, status="in_progress")
    out, err = StringIO(), StringIO()

    with pytest.raises(CommandError, match="1 version path"):
        call_command("export_transcripts", "--all-versions", stdout=out, stderr=err)

    assert len(out.getvalue().splitlines()) == 2
    assert f"conversation {nested.pk}: left out: a run is in progress" in err.getvalue()
