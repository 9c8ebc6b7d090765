"""Cases kept from conversations: the moment, the expectation, the fixtures, and JSON lines."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chat.agent import decisions
from chat.evals import cases
from chat.evals.cases import CaseRefused
from chat.models import Annotation, Case, CaseSet, ToolCall
from chat.testing import evals as made_for
from chat.testing import factories as make

pytestmark = pytest.mark.django_db(transaction=True)
SEARCHED = {"tool_calls": [{"name": "search_cards", "arguments": {"query": made_for.QUESTION}}]}


@pytest.fixture
def owner() -> Any:
    return make.user()


@pytest.fixture
def searched(owner: Any) -> Any:
    return made_for.searched(owner)


def test_a_case_after_the_question_expects_what_the_reply_called(searched: Any, owner: Any) -> None:
    case = cases.save_case(searched, 0, set_name=" cards ", user=owner)
    assert case.case_set.name == "cards"
    assert case.title == made_for.QUESTION
    assert case.expected == SEARCHED
    assert case.expected_text == 'search_cards({"query": "search the cards for pills"})'
    assert case.source == "reply"
    assert case.at_message == 0
    assert case.tool_names == ["search_cards", "get_current_time"]
    assert [f["name"] for f in case.fixtures] == ["search_cards"]


def test_a_case_after_a_tool_result_expects_the_answer_without_tools(
    searched: Any, owner: Any
) -> None:
    case = cases.save_case(searched, 2, set_name="cards", user=owner)
    assert case.expected == decisions.NO_TOOL
    assert [m["role"] for m in case.messages] == ["user", "assistant", "tool"]
    assert case.title.endswith("(after a tool result)")


@pytest.mark.parametrize(
    ("index", "problem"),
    [
        (1, "Message 1 is an assistant message"),
        (9, r"has no message 9 on its shown path \(its messages: 0 to 3\)"),
    ],
)
def test_a_moment_without_a_decision_is_refused(
    searched: Any, owner: Any, index: int, problem: str
) -> None:
    with pytest.raises(CaseRefused, match=problem):
        cases.save_case(searched, index, set_name="cards", user=owner)
    assert not Case.objects.exists()
    assert not CaseSet.objects.exists()


def test_the_last_message_needs_an_expectation(owner: Any) -> None:
    conversation = make.conversation(owner, "Q")
    make.run_turn(conversation, "hello")
    conversation.messages.filter(index=1).delete()
    with pytest.raises(CaseRefused, match="has no reply after it"):
        cases.save_case(conversation, 0, set_name="s", user=owner)
    case = cases.save_case(conversation, 0, set_name="s", user=owner, expected=decisions.NO_TOOL)
    assert case.expected == decisions.NO_TOOL


def test_a_bad_expectation_is_refused(searched: Any, owner: Any) -> None:
    with pytest.raises(CaseRefused, match="The expectation is not valid"):
        cases.save_case(searched, 0, set_name="s", user=owner, expected={"tool_calls": []})


def test_an_annotation_replaces_the_call_it_judges(searched: Any, owner: Any) -> None:
    call = ToolCall.objects.get(run__conversation=searched)
    bad = Annotation.objects.create(author=owner, run=call.run, tool_call=call, verdict="bad")
    with pytest.raises(CaseRefused, match="marked Bad without the call expected"):
        cases.expectation_from_annotation(bad)
    bad.expected = {"tool": "get_current_time", "arguments": {"timezone": "UTC"}}
    bad.save()
    expected = cases.expectation_from_annotation(bad)
    assert expected == decisions.expectation([("get_current_time", {"timezone": "UTC"})])
    bad.expected = {"no_tool": True}
    assert cases.expectation_from_annotation(bad) == decisions.NO_TOOL
    assert cases.moment_of_tool_call(call) == 0
    assert cases.moment_of_reply(call.run) == 0
    good = Annotation(author=owner, run=call.run, tool_call=call, verdict="good")
    assert cases.expectation_from_annotation(good) == SEARCHED


def test_export_and_import_round_trip(searched: Any, owner: Any) -> None:
    cases.save_case(searched, 0, set_name="cards", user=owner)
    cases.save_case(searched, 2, set_name="cards", user=owner, note="<b>answer</b>")
    lines = list(cases.export_lines(Case.objects.all()))
    done = cases.import_lines(lines, user=owner, set_name="copy")
    assert done.problems == []
    copies = list(CaseSet.objects.get(name="copy").cases.all())
    assert [json.loads(line) | {"set": "copy", "source": "imported"} for line in lines] == [
        {**cases.record(copy), "source": "imported"} for copy in copies
    ]


def test_import_reports_each_bad_line_and_keeps_the_good_ones(searched: Any, owner: Any) -> None:
    (good,) = cases.export_lines([cases.save_case(searched, 0, set_name="cards", user=owner)])
    record = json.loads(good)
    lines = [
        "{not json",
        json.dumps([1]),
        json.dumps({k: v for k, v in record.items() if k != "expected"}),
        json.dumps({**record, "messages": [{"role": "assistant", "content": "hi"}]}),
        json.dumps({**record, "expected": {"tool_calls": [{"name": "s", "arguments": 3}]}}),
        json.dumps({**record, "messages": [{"role": "tool", "content": "x"}]}),
        json.dumps({**record, "parameters": {"seed": 1}}),
        "",
        good,
    ]
    done = cases.import_lines(lines, user=owner)
    assert [p.split(":")[0] for p in done.problems] == [f"line {n}" for n in range(1, 8)]
    assert "not JSON" in done.problems[0]
    assert "a case is a JSON object" in done.problems[1]
    assert "expected" in done.problems[2]
    assert "must end with a user or a tool message" in done.problems[3]
    assert "must be a JSON object" in done.problems[4]
    assert "a tool message needs the tool_call_id it answers" in done.problems[5]
    assert "unknown parameter(s) seed" in done.problems[6]
    assert len(done.created) == 1
    assert all("\n" not in problem for problem in done.problems)
