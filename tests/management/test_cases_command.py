"""Tests of manage.py cases: add, list, export and import evaluation cases from the terminal."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from chat import access
from chat.evals import cases, records
from chat.models import Case, CaseSet
from chat.testing import evals as made_for
from chat.testing import factories as make

pytestmark = pytest.mark.django_db(transaction=True)

SEARCHED = 'search_cards({"query": "search the cards for pills"})'


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("cases", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def refused(*args: str) -> str:
    with pytest.raises(CommandError) as caught:
        run(*args)
    text = str(caught.value)
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.fixture
def owner() -> Any:
    return make.user()


@pytest.fixture
def searched(owner: Any) -> Any:
    """Messages 0 (user), 1 (assistant calling search_cards), 2 (tool), 3 (assistant)."""
    return made_for.searched(owner)


def test_add_without_expectations_keeps_what_the_reply_called(searched: Any) -> None:
    out, _ = run("add", "--conversation", str(searched.pk), "--at-message", "0")

    case = Case.objects.get()
    assert out == f'case {case.pk} "{made_for.QUESTION}" in set default: expects {SEARCHED}\n'
    assert (case.case_set.name, case.source, case.at_message) == ("default", "reply", 0)
    assert case.created_by is not None and case.created_by.username == "cli"
    assert [f["name"] for f in case.fixtures] == ["search_cards"]


def test_add_with_expected_calls_pairs_each_tool_with_its_arguments(
    searched: Any, owner: Any
) -> None:
    out, _ = run(
        "add", "--conversation", str(searched.pk), "--at-message", "0", "--set", "cards",
        "--title", "Pills", "--note", "two calls", "--user", owner.username,
        "--expect-tool", "search_cards", "--expect-args", '{"query": "pills"}',
        "--expect-tool", "get_current_time",
    )  # fmt: skip

    case = Case.objects.get()
    assert out == (
        f'case {case.pk} "Pills" in set cards: expects search_cards({{"query": "pills"}}), '
        "get_current_time({})\n"
    )
    assert case.expected == {
        "tool_calls": [
            {"name": "search_cards", "arguments": {"query": "pills"}},
            {"name": "get_current_time", "arguments": {}},
        ]
    }
    assert (case.source, case.note, case.created_by) == ("given", "two calls", owner)


def test_add_expecting_no_tool(searched: Any) -> None:
    out, _ = run("add", "--conversation", str(searched.pk), "--at-message", "0", "--expect-no-tool")
    assert out.endswith(": expects no tool\n")
    case = Case.objects.get()
    assert (case.expected, case.source) == ({"no_tool": True}, "given")


def test_a_case_after_the_tool_result_expects_the_answer(searched: Any) -> None:
    out, _ = run("add", "--conversation", str(searched.pk), "--at-message", "2")
    assert "(after a tool result)" in out and "expects no tool\n" in out
    assert out.endswith(f"{cases.WHY_NO_TOOL}\n")


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (["--at-message", "1"], "Message 1 is an assistant message"),
        (["--at-message", "9"], "has no message 9 on its shown path"),
        (["--at-message", "0", "--expect-tool", "search_cards", "--expect-args", "{bad"],
         "--expect-args '{bad': not JSON: Expecting property name"),
        (["--at-message", "0", "--expect-tool", "search_cards", "--expect-args", '{"q": NaN}'],
         """--expect-args '{"q": NaN}': not JSON: NaN is not a JSON number."""),
        (["--at-message", "0", "--expect-tool", "search_cards", "--expect-args", '{"q": 1e999}'],
         "not JSON: 1e999 is too large a number."),
        (["--at-message", "0", "--expect-tool", "search_cards", "--expect-args",
          '{"q": "\\ud800"}'], "a string holds a lone surrogate"),
        (["--at-message", "0", "--expect-tool", "search_cards", "--expect-args",
          '{"q": ' + "[" * 3000 + "]" * 3000 + "}"],
         "…': nested more than 64 levels deep."),
        (["--at-message", "0", "--expect-tool", "search_cards", "--expect-args", "[1]"],
         "--expect-args '[1]' is not a JSON object"),
        (["--at-message", "0", "--expect-args", "{}"], "--expect-args goes right after"),
        (["--at-message", "0", "--expect-tool", "a", "--expect-args", "{}", "--expect-args", "{}"],
         "--expect-args goes right after"),
        (["--at-message", "0", "--expect-tool", "a", "--expect-no-tool"], "exclude each other"),
        (["--at-message", "0", "--expect-tool", " "], "The expectation is not valid"),
        (["--at-message", "0", "--user", "ghost"], "No user named 'ghost'"),
    ],
)  # fmt: skip
def test_add_refuses_with_one_line_and_keeps_nothing(
    searched: Any, arguments: list[str], problem: str
) -> None:
    assert problem in refused("add", "--conversation", str(searched.pk), *arguments)
    assert not Case.objects.exists()


def test_add_for_a_named_user_asks_who_may_annotate(searched: Any) -> None:
    """A named user keeps a case only from a conversation they may annotate: theirs, or one
    shared with the team; elsewhere the rule's line, and no case, no set."""
    make.user("mallory")
    at = ("--conversation", str(searched.pk), "--at-message", "0", "--user")

    assert refused("add", *at, "mallory") == access.NOT_SHARED
    assert not CaseSet.objects.exists()

    searched.shared = True
    searched.save()
    run("add", *at, "mallory")
    assert Case.objects.get().created_by.username == "mallory"


def test_add_refuses_an_unknown_conversation() -> None:
    assert refused("add", "--conversation", "999", "--at-message", "0") == "No conversation 999."


def test_list_shows_a_table_or_json(searched: Any, owner: Any) -> None:
    first = cases.save_case(searched, 0, set_name="cards", user=owner)
    second = cases.save_case(searched, 2, set_name="answers", user=owner)

    out, _ = run("list")

    header, *rows = out.splitlines()
    assert header.split() == ["ID", "SET", "TITLE", "EXPECTS", "FIXTURES", "FROM"]
    assert rows[0].split()[:2] == [str(second.pk), "answers"] and "  no tool  " in rows[0]
    assert rows[1].split()[:2] == [str(first.pk), "cards"] and SEARCHED in rows[1]
    assert rows[1].split()[-5:] == ["1", "conversation", str(searched.pk), "message", "0"]
    assert header.index("EXPECTS") == rows[1].index(SEARCHED)

    out, _ = run("list", "--set", "cards", "--json")
    (listed,) = json.loads(out)
    assert listed["id"] == first.pk and listed["set"] == "cards"
    assert listed["expects"] == SEARCHED and listed["fixtures"] == 1
    assert (listed["conversation"], listed["at_message"]) == (searched.pk, 0)
    assert listed["tools"] == ["search_cards", "get_current_time"]


def test_list_of_an_unknown_set_and_of_none() -> None:
    assert refused("list", "--set", "nope") == "No case set named 'nope' (manage.py cases list)."
    out, _ = run("list")
    assert out.startswith("No cases.")


def test_export_then_import_gives_the_same_records(
    searched: Any, owner: Any, tmp_path: Path
) -> None:
    cases.save_case(searched, 0, set_name="cards", user=owner, note="kept")
    cases.save_case(searched, 2, set_name="cards", user=owner)
    cases.save_case(searched, 0, set_name="other", user=owner)
    path = tmp_path / "cards.jsonl"

    _, err = run("export", "--set", "cards", "--output", str(path))

    assert err == f"exported 2 cases of set cards to {path}\n"
    exported = path.read_text().splitlines()
    assert len(exported) == 2
    out, _ = run("export", "--set", "cards")
    assert out.splitlines() == exported

    out, err = run("import", str(path), "--set", "copy")

    assert (out, err) == ("imported 2 cases\n", "")
    copies = list(CaseSet.objects.get(name="copy").cases.order_by("pk"))
    originals = [json.loads(line) for line in exported]
    for copy, original in zip(copies, originals, strict=True):
        assert records.record(copy) == {**original, "set": "copy", "source": "imported"}
        assert copy.conversation is None


def test_import_reports_every_bad_line_and_imports_nothing(
    searched: Any, owner: Any, tmp_path: Path
) -> None:
    good = records.record(cases.save_case(searched, 0, set_name="cards", user=owner))
    no_title = {key: value for key, value in good.items() if key != "title"}
    bad_history = {**good, "messages": [{"role": "tool", "tool_call_id": "x", "content": "hi"}]}
    bad_expectation = {**good, "expected": {"tool_calls": []}}
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps(no_title),
        "",
        json.dumps(bad_history),
        json.dumps(bad_expectation),
        json.dumps({**good, "title": "Again", "set": "new set"}),
        json.dumps({**good, "set": "   "}),
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes("\n".join(lines).encode() + b"\n\xff\xfe\n")

    out = io.StringIO()
    err = io.StringIO()
    with pytest.raises(CommandError, match=r"^6 lines refused: nothing imported \(see above\)\.$"):
        call_command("cases", "import", str(path), stdout=out, stderr=err)

    assert out.getvalue() == ""
    problems = err.getvalue().splitlines()
    assert [p.split(":")[0] for p in problems] == [
        "line 2",
        "line 3",
        "line 5",
        "line 6",
        "line 8",
        "line 9",
    ]
    assert problems[0].startswith("line 2: not JSON")
    assert problems[1] == "line 3: title: Field required"
    assert problems[2].startswith("line 5: messages: message 0 (tool): orphan_tool_message")
    assert problems[3].startswith("line 6: expected: expected tool_calls must be a non-empty")
    assert problems[4] == "line 8: set: Name the case set."
    assert problems[5].startswith("line 9: not UTF-8 text")
    assert not Case.objects.filter(source="imported").exists()
    assert list(CaseSet.objects.values_list("name", flat=True)) == ["cards"]


def test_a_nan_or_a_huge_note_is_one_line_and_leaves_no_case_set(
    searched: Any, owner: Any, tmp_path: Path
) -> None:
    good = json.dumps(
        {**records.record(cases.save_case(searched, 0, set_name="cards")), "set": "x"}
    )
    nan = good.replace('"parameters": {}', '"parameters": {"temperature": NaN}')
    assert nan != good
    huge = json.dumps({**json.loads(good), "note": "n" * 1_000_000})
    for line, why in [
        (nan, "line 1: not JSON: NaN is not a JSON number"),
        (huge, "line 1: note: 1,000,000 characters, more than the 10,000 allowed"),
    ]:
        path = tmp_path / "bad.jsonl"
        path.write_text(line + "\n")
        out, err = io.StringIO(), io.StringIO()
        with pytest.raises(CommandError, match=r"^1 line refused: nothing imported"):
            call_command("cases", "import", str(path), stdout=out, stderr=err)
        assert err.getvalue() == why + "\n"
        assert "Traceback" not in out.getvalue() + err.getvalue()
        assert not CaseSet.objects.filter(name="x").exists()
    assert Case.objects.count() == 1


def test_import_reads_stdin(searched: Any, owner: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    line = next(records.export_lines([cases.save_case(searched, 0, set_name="cards", user=owner)]))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(line.encode() + b"\n")))

    out, _ = run("import", "-")

    assert out == "imported 1 case\n"
    assert CaseSet.objects.get(name="cards").cases.count() == 2


def test_import_of_a_missing_file_is_one_line() -> None:
    assert refused("import", "/nonexistent/cases.jsonl") == (
        "Cannot read /nonexistent/cases.jsonl: No such file or directory."
    )


def test_a_blank_set_option_is_one_line() -> None:
    assert refused("import", "/nonexistent/cases.jsonl", "--set", " ") == "--set needs a name."
