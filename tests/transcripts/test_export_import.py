"""Tests of chat.transcripts.export, imports and records, through export_transcripts and
import_transcripts."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chat import agent, agents, transcripts
from chat.agent import history
from chat.models import Conversation, HistoryRepair, Message, ModelCall, Run, ToolCall
from chat.testing import factories as make
from chat.testing.openai_script import validate_request

pytestmark = pytest.mark.django_db


def run(command: str, *args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(command, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def export(*args: str) -> list[dict[str, Any]]:
    out, _ = run("export_transcripts", *args)
    return [json.loads(line) for line in out.splitlines()]


def without_id(record: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if key != "id"}


def broken(owner: Any, title: str = "broken") -> Conversation:
    """A conversation ending on a tool call nobody answered, with no run in progress."""
    made = make.conversation(owner, title)
    transcripts.append_messages(
        made,
        [
            agent.ChatMessage(role="user", content="q"),
            agent.ChatMessage(role="assistant", tool_calls=(make.call("c1", "get_current_time"),)),
        ],
    )
    return made


def test_full_export_then_import_is_lossless(tmp_path: Path) -> None:
    owner = make.user("ada")
    original = make.rich_conversation(owner)
    big = make.big_conversation(owner, messages=20, tool_calls=30, runs=3)
    path = tmp_path / "full.jsonl"
    out, err = run("export_transcripts", "--format", "full", "--output", str(path))
    assert out == "" and f"Exported 2 conversation(s) to {path} (full format)." in err

    out, err = run("import_transcripts", str(path))

    assert "Imported 2 conversation(s)" in out
    assert err.startswith("line 2: warning: the history breaks the strict rules")
    copies = set(
        Conversation.objects.exclude(pk__in=[original.pk, big.pk]).values_list("pk", flat=True)
    )
    assert len(copies) == 2
    before = [without_id(line) for line in map(json.loads, path.read_text().splitlines())]
    after = [without_id(r) for r in export("--format", "full") if r["id"] in copies]
    assert after == before
    copy = Conversation.objects.get(pk__in=copies, title=original.title)
    assert copy.created_at == original.created_at and copy.updated_at == original.updated_at
    copied_run = Run.objects.filter(conversation=copy).order_by("started_at").first()
    assert copied_run is not None and copied_run.heartbeat_at == make.T0
    assert ToolCall.objects.filter(run__conversation=copy, status="failed").count() == 1
    assert Message.objects.get(conversation=copy, index=1).content is None
    assert Message.objects.get(conversation=copy, index=6).content == ""
    assert HistoryRepair.objects.filter(conversation=copy, run__isnull=False).count() == 1
    assert ModelCall.objects.filter(run__conversation=copy).count() == 3


def test_openai_export_is_what_a_strict_endpoint_accepts() -> None:
    make.rich_conversation(make.user("ada"))

    (record,) = export()

    assert record.pop("purpose") == "chat"  # for the reader: dropped before sending
    assert set(record) == {"messages", "tools"}
    assert validate_request({"model": "m", **record}) is None
    assert record["messages"][0] == {"role": "system", "content": "Be brief."}
    assert [m["role"] for m in record["messages"]][1:] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assistant = record["messages"][2]
    assert assistant["content"] == "" and len(assistant["tool_calls"]) == 2
    assert all(m.get("tool_calls") != [] for m in record["messages"])
    assert not any("reasoning" in m for m in record["messages"])
    assert [tool["function"]["name"] for tool in record["tools"]] == [
        "get_current_time",
        "handoff_note",
    ]


@pytest.mark.django_db(transaction=True)
def test_openai_export_of_a_scripted_run_replays_on_a_strict_endpoint() -> None:
    run("chat", "What time is it in Asia/Tokyo? And leave a handoff note.", "--all-tools")

    (record,) = export()

    assert validate_request({"model": "m", **record}) is None
    names = {
        call["function"]["name"] for m in record["messages"] for call in m.get("tool_calls", ())
    }
    assert names == {"get_current_time", "handoff_note"}


def test_openai_export_leaves_out_broken_histories_and_says_so() -> None:
    owner = make.user("ada")
    good = make.rich_conversation(owner)
    bad = broken(owner)
    make.conversation(owner, "empty")
    out, err = StringIO(), StringIO()

    with pytest.raises(CommandError, match="1 conversation"):
        call_command("export_transcripts", stdout=out, stderr=err)

    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["messages"][1]["role"] == "user"
    assert f"conversation {bad.pk}: left out" in err.getvalue()
    assert "unanswered_tool_call" in err.getvalue()
    assert "validate_transcripts --fix" in err.getvalue()
    assert "1 without messages" in err.getvalue()
    assert good.pk != bad.pk


def test_stdout_stays_clean_json_lines_with_a_progress_bar() -> None:
    owner = make.user("ada")
    for number in range(3):
        make.rich_conversation(owner, title=f"c{number}")

    out, err = run("export_transcripts", "--format", "full", "--progress")

    assert "Exporting [" in err and "3/3 conversations" in err
    lines = out.splitlines()
    assert len(lines) == 3
    assert all(isinstance(json.loads(line), dict) for line in lines)
    assert "Exporting" not in out and "Exported" not in out


def test_export_filters_by_user_date_and_conversation() -> None:
    ada, bob = make.user("ada"), make.user("bob")
    first = make.rich_conversation(ada, "first")
    second = make.rich_conversation(bob, "second")
    Conversation.objects.filter(pk=first.pk).update(updated_at=make.T0)

    assert [r["title"] for r in export("--format", "full", "--user", "bob")] == ["second"]
    assert [r["title"] for r in export("--format", "full", "--since", "2025-03-02")] == ["second"]
    since = "2025-03-01T09:30:00+00:00"
    assert len(export("--format", "full", "--since", since)) == 2
    only = export("--format", "full", "--conversation", str(first.pk))
    assert [r["id"] for r in only] == [first.pk]
    assert second.pk not in [r["id"] for r in only]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--user", "ghost"], "No user named 'ghost'"),
        (["--since", "yesterday"], "use YYYY-MM-DD"),
        (["--since", "2025-02-30"], "not a date"),
        (["--conversation", "999"], "No conversation 999"),
        (["--output", "/nonexistent/dir/out.jsonl"], "Cannot write /nonexistent/dir/out.jsonl"),
    ],
)
def test_export_refuses_bad_input(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("export_transcripts", *args)


def test_openai_lines_import_as_new_conversations_of_the_given_user(tmp_path: Path) -> None:
    make.rich_conversation(make.user("ada"))
    bob = make.user("bob")
    (record,) = export()
    record["tools"].append({"type": "function", "function": {"name": "launch_rocket"}})
    path = tmp_path / "openai.jsonl"
    path.write_text(json.dumps(record) + "\n")

    out, err = run("import_transcripts", str(path), "--user", "bob")

    assert "Imported 1 conversation(s)" in out
    assert "line 1: warning: tools not available here, left disabled: launch_rocket" in err
    copy = Conversation.objects.get(owner=bob)
    assert copy.title == "What time is it? Leave a note <b>too</b>."
    parameters = copy.agent_parameters()
    assert parameters.system_prompts == ("Be brief.",)
    assert parameters.enabled_tools == ("get_current_time", "handoff_note")
    assert history.validate(transcripts.load_history(copy)) == []
    record["tools"].pop()
    (again,) = export("--user", "bob")
    assert again == record


def test_import_reports_each_bad_line_and_writes_nothing_of_it(tmp_path: Path) -> None:
    owner = make.user("ada")
    make.rich_conversation(owner)
    make.user("carol")
    (full,) = export("--format", "full")
    (openai,) = export()
    Conversation.objects.all().delete()
    stranger = {**full, "runs": [{**full["runs"][0], "created_by": "ghost"}, full["runs"][1]]}
    dangling = {**full, "messages": [{**full["messages"][0], "run": 9}]}
    orphan = {"messages": [{"role": "tool", "tool_call_id": "x", "content": "{}"}]}
    lines = [
        json.dumps(full),
        "{not json",
        "[1, 2]",
        json.dumps({**full, "owner": "nobody"}),
        json.dumps(stranger),
        json.dumps(dangling),
        "",
        json.dumps(orphan),
        json.dumps({"messages": [{"role": "robot", "content": "beep"}]}),
        json.dumps(openai),
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out, err = StringIO(), StringIO()

    with pytest.raises(CommandError, match="6 line"):
        call_command("import_transcripts", str(path), "--user", "carol", stdout=out, stderr=err)

    report = err.getvalue()
    assert "line 2: not JSON" in report
    assert "line 3: a record must be a JSON object, not list" in report
    assert "line 4:" not in report
    assert "line 5: no user named 'ghost'" in report
    assert "line 6: message 0: no run 9" in report
    assert "line 8: the history breaks the strict rules" in report
    assert "orphan_tool_message" in report
    assert "line 9: messages.0: role" in report
    assert "Imported 3 conversation(s)" in out.getvalue()
    assert Conversation.objects.count() == 3
    assert set(Conversation.objects.values_list("owner__username", flat=True)) == {"carol"}
    assert Run.objects.count() == 4


def test_full_lines_need_their_owner_to_exist(tmp_path: Path) -> None:
    make.rich_conversation(make.user("ada"))
    (full,) = export("--format", "full")
    path = tmp_path / "full.jsonl"
    path.write_text(json.dumps({**full, "owner": "nobody"}) + "\n")
    err = StringIO()

    with pytest.raises(CommandError, match="1 line"):
        call_command("import_transcripts", str(path), stdout=StringIO(), stderr=err)

    assert "line 1: no user named 'nobody' (pass --user" in err.getvalue()
    assert Conversation.objects.count() == 1


def test_openai_lines_need_a_user(tmp_path: Path) -> None:
    path = tmp_path / "openai.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    err = StringIO()

    with pytest.raises(CommandError):
        call_command("import_transcripts", str(path), stdout=StringIO(), stderr=err)

    assert "line 1: the openai format has no owner: pass --user" in err.getvalue()
    assert not Conversation.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["/nonexistent.jsonl"], "Cannot read /nonexistent.jsonl: No such file"),
        (["/"], "Cannot read /: Is a directory"),
        (["/dev/null", "--user", "ghost"], "No user named 'ghost'"),
    ],
)
def test_import_refuses_a_bad_file_or_user(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("import_transcripts", *args)


def test_a_line_that_is_not_utf8_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "binary.jsonl"
    path.write_bytes(b'{"messages": "\xff\xfe"}\n')
    err = StringIO()

    with pytest.raises(CommandError):
        call_command("import_transcripts", str(path), stdout=StringIO(), stderr=err)

    assert "line 1: not UTF-8 text" in err.getvalue()


def test_a_tool_not_available_here_does_not_break_the_export(tmp_path: Path) -> None:
    """The full export crashed with a traceback and an empty file; the openai one offers only
    what this process has."""
    made = make.rich_conversation(make.user("ada"))
    made.parameters = {**made.parameters, "enabled_tools": ["get_current_time", "module_tool"]}
    made.save()

    (full,) = export("--format", "full")
    (openai,) = export("--format", "openai")

    assert full["parameters"]["enabled_tools"] == ["get_current_time", "module_tool"]
    assert [tool["function"]["name"] for tool in openai["tools"]] == ["get_current_time"]
    path = tmp_path / "full.jsonl"
    path.write_text(json.dumps(full) + "\n")
    run("import_transcripts", str(path))
    copy = Conversation.objects.exclude(pk=made.pk).get()
    assert copy.parameters["enabled_tools"] == ["get_current_time", "module_tool"]


def test_openai_lines_without_a_user_are_refused_once_and_broken_lines_still_show(
    tmp_path: Path,
) -> None:
    """The owner complaint on every line used to hide the real error of a broken line."""
    good = {"messages": [{"role": "user", "content": "hi"}]}
    lines = [json.dumps(good)] * 3 + ["{not json", json.dumps(good)]
    path = tmp_path / "openai.jsonl"
    path.write_text("\n".join(lines) + "\n")
    err = StringIO()

    with pytest.raises(CommandError, match="5 line"):
        call_command("import_transcripts", str(path), stdout=StringIO(), stderr=err)

    report = err.getvalue().splitlines()
    assert report[0] == "line 1: the openai format has no owner: pass --user"
    assert report[1].startswith("line 4: not JSON")
    assert "3 more line(s) in the openai format were skipped for the same reason" in report[2]
    assert sum("no owner" in line for line in report) == 1
    assert not Conversation.objects.exists()


def test_mcp_tools_are_exported_as_offered_and_kept_on_import(tmp_path: Any) -> None:
    from chat.models import McpServer, McpTool

    server = McpServer.objects.create(name="docs", transport="http", url="http://x/mcp")
    schema = {"type": "object", "properties": {"query": {"type": "string"}}}
    McpTool.objects.create(
        server=server, name="search_docs", exposed_name="docs__search_docs", input_schema=schema
    )
    McpTool.objects.create(server=server, name="gone", exposed_name="docs__gone", available=False)
    made = make.conversation(make.user("ada"), "mcp export")
    made.parameters = {"enabled_tools": ["get_current_time", "docs__*"]}
    made.save()
    transcripts.append_messages(made, [agent.ChatMessage(role="user", content="find")])

    (record,) = export("--format", "openai")
    names = [tool["function"]["name"] for tool in record["tools"]]
    assert names == ["get_current_time", "docs__search_docs"]  # the unavailable one is not
    assert record["tools"][1]["function"]["parameters"] == schema

    path = tmp_path / "openai.jsonl"
    path.write_text(json.dumps(record) + "\n")
    run("import_transcripts", str(path), "--user", "ada")
    imported = Conversation.objects.exclude(pk=made.pk).get()
    assert imported.agent_parameters().enabled_tools == ("get_current_time", "docs__search_docs")


def started_from_support(owner: Any, visibility: str = "private") -> Conversation:
    """A conversation whose settings are Support v1's (Support made from it)."""
    made = make.rich_conversation(owner)
    agents.create_agent(name="Support", conversation=made, user=owner, visibility=visibility)
    made.refresh_from_db()
    return made


def test_the_agent_version_is_exported_and_linked_again_on_import(tmp_path: Path) -> None:
    owner = make.user("ada")
    original = started_from_support(owner)
    make.rich_conversation(owner, title="from Default")
    lines = {line["title"]: line for line in export("--format", "full")}
    assert (lines[original.title]["agent"], lines[original.title]["agent_version"]) == (
        "Support",
        1,
    )
    assert (lines["from Default"]["agent"], lines["from Default"]["agent_version"]) == (None, None)
    path = tmp_path / "full.jsonl"
    path.write_text(json.dumps(lines[original.title]) + "\n")

    _, err = run("import_transcripts", str(path))

    assert err == ""
    copy = Conversation.objects.exclude(pk=original.pk).exclude(title="from Default").get()
    assert copy.agent_version == original.agent_version
    again = [r for r in export("--format", "full") if r["id"] == copy.pk]
    assert [without_id(r) for r in again] == [without_id(lines[original.title])]


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"agent": "Nobody"}, "no such agent"),
        ({"agent_version": 7}, "no such version"),
        ({"owner": "bob"}, "a private agent of someone else's"),
    ],
)
def test_an_agent_version_that_is_not_here_is_not_linked(
    tmp_path: Path, changes: dict[str, Any], why: str
) -> None:
    started_from_support(make.user("ada"))
    make.user("bob")
    (line,) = export("--format", "full")
    path = tmp_path / "full.jsonl"
    path.write_text(json.dumps({**line, **changes}) + "\n")

    _, err = run("import_transcripts", str(path))

    assert "line 1: warning: it started from " in err, why
    assert "its settings are kept, linked to no agent" in err
    copy = Conversation.objects.order_by("pk").last()
    assert copy is not None and copy.agent_version is None
    assert copy.parameters == line["parameters"]


@pytest.mark.parametrize("missing", ["agent", "agent_version"])
def test_an_agent_without_its_version_or_the_reverse_is_refused(
    tmp_path: Path, missing: str
) -> None:
    started_from_support(make.user("ada"))
    (line,) = export("--format", "full")
    path = tmp_path / "full.jsonl"
    path.write_text(json.dumps({**line, missing: None}) + "\n")
    err = StringIO()

    with pytest.raises(CommandError, match="1 line"):
        call_command("import_transcripts", str(path), stdout=StringIO(), stderr=err)

    assert "give both (or neither, for Default)" in err.getvalue()
    assert Conversation.objects.count() == 1


def test_export_names_every_agent_version_in_a_fixed_number_of_queries(
    django_assert_max_num_queries: Any,
) -> None:
    owner = make.user("ada")
    started_from_support(owner)
    with CaptureQueriesContext(connection) as one:
        export("--format", "full")
    for number in range(3):
        made = make.rich_conversation(owner, title=f"more {number}")
        agents.create_agent(name=f"Support {number}", conversation=made, user=owner)
    with django_assert_max_num_queries(len(one)):
        lines = export("--format", "full")
    assert {line["agent"] for line in lines} == {"Support", "Support 0", "Support 1", "Support 2"}
