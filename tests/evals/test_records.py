"""Cases as JSON Lines (chat/evals/records.py): export as stored, import all or none, every line
through the bounded gate."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chat.evals import cases, records
from chat.models import Case, CaseSet
from chat.testing import evals as made_for
from chat.testing import factories as make
from chat.transcripts.limits import MAX_DEPTH, NOTE_CHARS

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def owner() -> Any:
    return make.user()


@pytest.fixture
def line(owner: Any) -> str:
    """A good case line: the moment after the question of `searched`, its conversation gone."""
    case = cases.save_case(made_for.searched(owner), 0, set_name="cards", user=owner)
    (text,) = records.export_lines([case])
    Case.objects.all().delete()
    CaseSet.objects.all().delete()
    return text


def with_value(line: str, where: str, raw: str) -> str:
    """`line` with `raw` (JSON text, perhaps not JSON at all) as its parameter or note."""
    record = json.loads(line)
    record[where] = "@@"
    return json.dumps(record).replace('"@@"', raw)


def test_export_and_import_round_trip(owner: Any) -> None:
    searched = made_for.searched(owner)
    cases.save_case(searched, 0, set_name="cards", user=owner)
    cases.save_case(searched, 2, set_name="cards", user=owner, note="<b>answer</b>")
    lines = list(records.export_lines(Case.objects.all()))
    done = records.import_lines(lines, user=owner, set_name="copy")
    assert done.problems == []
    copies = list(CaseSet.objects.get(name="copy").cases.all())
    assert [json.loads(line) | {"set": "copy", "source": "imported"} for line in lines] == [
        {**records.record(copy), "source": "imported"} for copy in copies
    ]


def test_import_reports_each_bad_line_and_stores_nothing(line: str, owner: Any) -> None:
    record = json.loads(line)
    lines = [
        "{not json",
        json.dumps([1]),
        json.dumps({k: v for k, v in record.items() if k != "expected"}),
        json.dumps({**record, "messages": [{"role": "assistant", "content": "hi"}]}),
        json.dumps({**record, "expected": {"tool_calls": [{"name": "s", "arguments": 3}]}}),
        json.dumps({**record, "messages": [{"role": "tool", "content": "x"}]}),
        json.dumps({**record, "parameters": {"seed": 1}}),
        json.dumps({**record, "set": "   "}),
        "",
        line,
    ]
    done = records.import_lines(lines, user=owner)
    assert [p.split(":")[0] for p in done.problems] == [f"line {n}" for n in range(1, 9)]
    assert "not JSON" in done.problems[0]
    assert "a case is a JSON object" in done.problems[1]
    assert "expected" in done.problems[2]
    assert "must end with a user or a tool message" in done.problems[3]
    assert "must be a JSON object" in done.problems[4]
    assert "a tool message needs the tool_call_id it answers" in done.problems[5]
    assert "unknown parameter(s) seed" in done.problems[6]
    assert done.problems[7] == "line 8: set: Name the case set."
    assert all("\n" not in problem for problem in done.problems)
    assert done.created == []
    assert not Case.objects.exists() and not CaseSet.objects.exists()

    assert len(records.import_lines(lines[-1:], user=owner).created) == 1


HOSTILE = {
    "nan": ("parameters", '{"temperature": NaN}', "not JSON: NaN is not a JSON number"),
    "infinity": ("parameters", '{"temperature": Infinity}', "not JSON: Infinity is not"),
    "too large": ("parameters", '{"temperature": 1e999}', "not JSON: 1e999 is too large"),
    "surrogate": ("note", '"\\ud800"', "a string holds a lone surrogate"),
    "deep": ("note", "[" * 3000 + "]" * 3000, f"nested more than {MAX_DEPTH} levels deep"),
    "long note": (
        "note",
        json.dumps("n" * (NOTE_CHARS + 1)),
        "note: 10,001 characters, more than the 10,000 allowed",
    ),
}


@pytest.mark.parametrize(("where", "raw", "why"), HOSTILE.values(), ids=HOSTILE.keys())
def test_a_line_the_gate_refuses_leaves_nothing_behind(
    line: str, owner: Any, where: str, raw: str, why: str
) -> None:
    done = records.import_lines([line, with_value(line, where, raw)], user=owner)

    (problem,) = done.problems
    assert problem.startswith("line 2: ") and why in problem, problem
    assert len(problem) < 200
    assert not Case.objects.exists() and not CaseSet.objects.exists()


def test_a_long_tool_result_is_folded_with_a_note(line: str, owner: Any) -> None:
    record = json.loads(line)
    asked = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t"}}],
    }
    answer = {"role": "tool", "tool_call_id": "c1", "content": "r" * 150_000}
    record["messages"] = [*record["messages"], asked, answer]

    read = records.read_lines([json.dumps(record)])

    assert read.problems == []
    assert read.notes == [
        "line 1: warning: messages.2: tool result folded to its first 100,000 of 150,000 characters"
    ]
    (case,) = records.store(read.records, user=owner)
    assert case.messages[-1]["content"].endswith(
        "[folded on import: the first 100,000 of 150,000 characters]"
    )
