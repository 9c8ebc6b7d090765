"""Tests of chat.transcripts.records and import_transcripts on hostile lines: each costs one line
on stderr, writes nothing, and the lines after it are still imported."""

from __future__ import annotations

import json
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from chat.management.commands import import_transcripts
from chat.models import Conversation, Message, ModelCall, Run, ToolCall
from chat.testing import factories as make
from chat.transcripts.forks import MAX_TOOL_RESULT_CHARS
from chat.transcripts.limits import DB_INT_MAX, MAX_DEPTH, MAX_TEXT_CHARS

pytestmark = pytest.mark.django_db

GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
CALL = {"id": "c1", "type": "function", "function": {"name": "get_current_time", "arguments": "{}"}}


def asking(*calls: Any, **message: Any) -> dict[str, Any]:
    """An openai record whose assistant message asks for `calls`."""
    assistant = {"role": "assistant", "content": "", "tool_calls": list(calls), **message}
    return {"messages": [{"role": "user", "content": "time?"}, assistant]}


def said(content: Any, role: str = "user") -> dict[str, Any]:
    """An openai record whose last message, of `role`, says `content`."""
    if role == "user":
        return {"messages": [{"role": "user", "content": content}]}
    if role == "tool":
        answer = {"role": "tool", "tool_call_id": "c1", "content": content}
        return {"messages": [*asking(CALL)["messages"], answer]}
    return {"messages": [{"role": "user", "content": "q"}, {"role": role, "content": content}]}


def nested(depth: int) -> str:
    return json.dumps({**GOOD, "tools": []})[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"


@pytest.fixture
def full() -> dict[str, Any]:
    """A full record of the rich conversation (owner `ada`), the conversation deleted."""
    make.rich_conversation(make.user("ada"))
    out = StringIO()
    call_command("export_transcripts", "--format", "full", stdout=out, stderr=StringIO())
    Conversation.objects.all().delete()
    record: dict[str, Any] = json.loads(out.getvalue())
    return record


def import_between(tmp_path: Path, hostile: str) -> tuple[str, str]:
    """Import a good line, `hostile`, a good line; the hostile line must fail alone."""
    make.user("carol")
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join([json.dumps(GOOD), hostile, json.dumps(GOOD)]) + "\n")
    out, err = StringIO(), StringIO()

    with pytest.raises(CommandError, match="1 line"):
        call_command("import_transcripts", str(path), "--user", "carol", stdout=out, stderr=err)

    assert "Imported 2 conversation(s)" in out.getvalue()
    assert Conversation.objects.count() == 2
    assert Message.objects.count() == 4
    return out.getvalue(), err.getvalue()


def assert_one_line(err: str, reason: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1, err[:2000]
    assert lines[0].startswith("line 2: "), lines[0][:2000]
    assert reason in lines[0], lines[0][:2000]
    assert "Traceback" not in err and len(lines[0]) < 1200


OPENAI_LINES = {
    "function is a string": (
        json.dumps(asking({"id": "c1", "type": "function", "function": "get_current_time"})),
        "messages.1: tool_calls.0.function:",
    ),
    "tool_calls is a string": (
        json.dumps(asking(content="", tool_calls="get_current_time")),
        "messages.1: tool_calls: Input should be a valid list",
    ),
    "tool call without a function": (
        json.dumps(asking({"id": "c1", "type": "function"})),
        "messages.1: tool_calls.0.function: Field required",
    ),
    "tool call of another type": (
        json.dumps(asking({**CALL, "type": "custom"})),
        "messages.1: tool_calls.0.type: Input should be 'function'",
    ),
    "arguments are a number": (
        json.dumps(asking({**CALL, "function": {"name": "n", "arguments": 3}})),
        "messages.1: tool_calls.0.function.arguments:",
    ),
    "200,000 brackets deep": (
        "[" * 200_000 + "]" * 200_000,
        f"nested more than {MAX_DEPTH} levels deep",
    ),
    "deep inside a record": (nested(MAX_DEPTH + 5), f"nested more than {MAX_DEPTH} levels"),
    "NaN is not JSON": (json.dumps(GOOD)[:-1] + ', "x": NaN}', "not JSON: NaN"),
    "a number too large for a float": (json.dumps(GOOD)[:-1] + ', "x": 1e400}', "not JSON"),
    "a lone surrogate": (
        json.dumps({"messages": [{"role": "user", "content": "\ud800"}]}),
        "a string holds a lone surrogate",
    ),
    "a NUL character (PostgreSQL keeps none)": (
        json.dumps({"messages": [{"role": "user", "content": "a\u0000b"}]}),
        "a string holds a NUL character",
    ),
    "an image part that is no image": (
        json.dumps(
            said(
                [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ]
            )
        ),
        "messages.0: parts.0: image-1.png says it is an image, but its content is not one",
    ),
    "an audio part": (
        json.dumps(said([{"type": "input_audio", "input_audio": {"data": "AAAA"}}])),
        "content part of type 'input_audio' is not supported",
    ),
    "a part that is not an object": (
        json.dumps(said(["hi"])),
        "messages.0: content: a content part must be an object with a type",
    ),
    "a refusal": (
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": None, "refusal": "I can't help with that."},
                ]
            }
        ),
        "messages.1: refusal is not supported",
    ),
    "a legacy function_call": (
        json.dumps(asking(function_call={"name": "get_current_time", "arguments": "{}"})),
        "messages.1: function_call (the legacy shape) is not supported: use tool_calls",
    ),
    "an assistant message too long": (
        json.dumps(said("x" * (MAX_TEXT_CHARS + 1), "assistant")),
        f"messages.1: content: 1,000,001 characters, more than the {MAX_TEXT_CHARS:,}",
    ),
    "a tool_call_id too long": (
        json.dumps(asking({**CALL, "id": "c" * 201})),
        "messages.1: tool_calls.0.id: 201 characters, more than the 200",
    ),
    "thousands of errors": (
        json.dumps({"messages": [{"role": "robot"}] * 5000}),
        "messages.0: role: Input should be",
    ),
}


@pytest.mark.parametrize(("line", "reason"), OPENAI_LINES.values(), ids=OPENAI_LINES.keys())
def test_a_hostile_openai_line_costs_one_line(tmp_path: Path, line: str, reason: str) -> None:
    _, err = import_between(tmp_path, line)

    assert_one_line(err, reason)


def test_a_user_message_over_the_web_limit_is_refused(tmp_path: Path, settings: Any) -> None:
    settings.AGENTLAB_MAX_MESSAGE_CHARS = 100

    _, err = import_between(tmp_path, json.dumps(said("x" * 101)))

    assert_one_line(
        err, "messages.0: content: the user message is 101 characters, more than the 100"
    )


FULL_EDITS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "index above 2^63": (
        lambda r: r["messages"][0].update(index=2**64),
        f"messages.0: index: more than {DB_INT_MAX:,}",
    ),
    "index above 2^31": (
        lambda r: r["messages"][0].update(index=2**40),
        f"messages.0: index: more than {DB_INT_MAX:,}",
    ),
    "prompt_tokens above 2^63": (
        lambda r: r["runs"][0].update(prompt_tokens=2**70),
        "runs.0: prompt_tokens: more than",
    ),
    "http_status above 2^63": (
        lambda r: r["runs"][0]["model_calls"][0].update(http_status=2**64),
        "runs.0: model_calls.0.http_status: more than",
    ),
    "function is a string": (
        lambda r: r["messages"][1]["tool_calls"][0].update(function="get_current_time"),
        "messages.1: tool_calls.0.function:",
    ),
    "tool_calls is a string": (
        lambda r: r["messages"][1].update(tool_calls="get_current_time"),
        "messages.1: tool_calls: Input should be a valid list",
    ),
    "an image part": (
        lambda r: r["messages"][0].update(content=[{"type": "image_url", "image_url": {}}]),
        "messages.0: content: content part of type 'image_url' is not supported",
    ),
    "a duration of Infinity": (
        lambda r: r["runs"][0].update(duration="Infinity"),
        "runs.0: duration: Input should be a finite number",
    ),
    "a finish_reason too long": (
        lambda r: r["runs"][0]["model_calls"][0].update(finish_reason="x" * 41),
        "runs.0: model_calls.0.finish_reason: 41 characters, more than the 40",
    ),
    "a date out of range": (
        lambda r: r["messages"][0].update(created_at="9999-12-31T23:00:00-14:00"),
        "messages.0: created_at: the date is out of range",
    ),
    "a tool call with no message": (
        lambda r: r["runs"][0]["tool_calls"][0].update(message=99),
        "runs.0: tool call 'call_a': no message",
    ),
}


@pytest.mark.parametrize(("edit", "reason"), FULL_EDITS.values(), ids=FULL_EDITS.keys())
def test_a_hostile_full_line_costs_one_line(
    tmp_path: Path, full: dict[str, Any], edit: Callable[[dict[str, Any]], None], reason: str
) -> None:
    edit(full)

    _, err = import_between(tmp_path, json.dumps(full))

    assert_one_line(err, reason)
    assert not Run.objects.exists() and not ToolCall.objects.exists()


def test_text_parts_are_joined_with_a_blank_line(tmp_path: Path) -> None:
    parts = [{"type": "text", "text": "First part."}, {"type": "text", "text": "Second part."}]
    path = tmp_path / "parts.jsonl"
    path.write_text(json.dumps(said(parts)) + "\n")

    make.user("ada")

    call_command("import_transcripts", str(path), "--user", "ada", stdout=StringIO())

    assert Message.objects.get().content == "First part.\n\nSecond part."


def test_a_long_tool_result_is_folded_and_said_so(tmp_path: Path, full: dict[str, Any]) -> None:
    long = "y" * (MAX_TOOL_RESULT_CHARS * 3)
    full["messages"][2]["content"] = long
    full["runs"][0]["tool_calls"][0]["result"] = long
    lines = [json.dumps(full), json.dumps(said(long, "tool"))]
    path = tmp_path / "long.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out, err = StringIO(), StringIO()

    call_command("import_transcripts", str(path), "--user", "ada", stdout=out, stderr=err)

    report = err.getvalue()
    size = f"first {MAX_TOOL_RESULT_CHARS:,} of {len(long):,} characters"
    assert f"line 1: warning: message 2: tool result folded to its {size}" in report
    assert f"line 1: warning: runs.0: tool call 'call_a': result folded to its {size}" in report
    assert f"line 2: warning: messages.2: tool result folded to its {size}" in report
    folded = Message.objects.filter(role="tool", content__startswith="yyy")
    assert folded.count() == 2
    for message in folded:
        assert message.content is not None and len(message.content) < MAX_TOOL_RESULT_CHARS + 200
        assert message.content.endswith(f"[folded on import: the {size}]")
    assert ToolCall.objects.get(call_id="call_a").result.startswith("y" * 1000)


def test_anything_else_a_line_raises_is_one_line_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = import_transcripts.import_record

    def flaky(record: Any, **kwargs: Any) -> Any:
        if len(record.messages) == 1:
            raise RuntimeError("boom\nsecond line")
        return real(record, **kwargs)

    monkeypatch.setattr(import_transcripts, "import_record", flaky)

    _, err = import_between(tmp_path, json.dumps(said("one message")))

    assert_one_line(err, "cannot import (RuntimeError: boom second line)")


def test_the_bounds_are_for_imports_not_for_exports(settings: Any) -> None:
    owner = make.user("ada")
    made = make.rich_conversation(owner)
    Message.objects.filter(conversation=made, role="user").update(content="z" * 200)
    ModelCall.objects.filter(run__conversation=made).update(finish_reason="f" * 60)
    settings.AGENTLAB_MAX_MESSAGE_CHARS = 100
    out = StringIO()

    call_command("export_transcripts", "--format", "full", stdout=out, stderr=StringIO())

    (record,) = map(json.loads, out.getvalue().splitlines())
    assert record["messages"][0]["content"] == "z" * 200
