"""Cases kept from conversations: the moment, the expectation, the fixtures, the bounds."""

from __future__ import annotations

from typing import Any

import pytest

from chat.agent import decisions
from chat.evals import cases
from chat.evals.cases import CaseRefused
from chat.models import Annotation, Case, CaseSet, ToolCall
from chat.testing import evals as made_for
from chat.testing import factories as make
from chat.transcripts.limits import NOTE_CHARS

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


def test_a_note_past_the_limit_every_entry_point_shares_is_refused(
    searched: Any, owner: Any
) -> None:
    with pytest.raises(CaseRefused, match=r"^The note is 10,001 characters, more than the 10,000"):
        cases.save_case(searched, 0, set_name="cards", user=owner, note="n" * (NOTE_CHARS + 1))
    assert not CaseSet.objects.exists()
    assert cases.save_case(searched, 0, set_name="cards", user=owner, note="n" * NOTE_CHARS)


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ({"q": "\ud800"}, "lone surrogate"),
        ({"q": float("nan")}, "nan is not a JSON number"),
        ({"q": float("inf")}, "inf is not a JSON number"),
        ({"q": "a\x00b"}, "NUL character"),
    ],
    ids=["surrogate", "nan", "infinity", "nul"],
)
def test_an_expectation_the_gate_refuses_is_not_kept(
    searched: Any, owner: Any, arguments: dict[str, Any], why: str
) -> None:
    expected = decisions.expectation([("search_cards", arguments)])
    with pytest.raises(CaseRefused, match=f"^The case cannot be kept: its expected: .*{why}"):
        cases.save_case(searched, 0, set_name="cards", user=owner, expected=expected)
    assert not Case.objects.exists() and not CaseSet.objects.exists()


@pytest.mark.parametrize(
    ("text", "title"),
    [
        (
            '"What time in Tokyo? [[call get_current_time {\\"timezone\\": \\"Asia/Tokyo\\"}]]"',
            "What time in Tokyo?",
        ),
        ("What time in Tokyo? [[call get_current_time {", "What time in Tokyo?"),
        ("Line one\\nline two \\u00e9t\\u00e9", "Line one line two été"),
        ("**Search** the cards for `pills`.", "Search the cards for pills"),
        ("a path C:\\Users\\me", "a path C:\\Users\\me"),
        ("[[call search_cards {}]]", ""),
    ],
)
def test_a_question_reads_as_a_title(text: str, title: str) -> None:
    assert cases.question_title(text) == title


def test_a_default_title_is_the_question_without_its_scripting(owner: Any) -> None:
    chat = make.conversation(owner, "Tokyo", enabled_tools=["get_current_time"])
    make.run_turn(chat, 'What time in Tokyo? [[call get_current_time {"timezone": "Asia/Tokyo"}]]')
    case = cases.save_case(chat, 0, set_name="times", user=owner)
    assert case.title == "What time in Tokyo?"
    bare = make.conversation(owner, "Bare", enabled_tools=["get_current_time"])
    make.run_turn(bare, "[[call get_current_time]]")
    assert cases.save_case(bare, 0, set_name="times", user=owner).title == "A conversation"


def test_why_a_case_at_a_tool_message_expects_no_tool() -> None:
    assert cases.why_expected("tool", decisions.NO_TOOL) == cases.WHY_NO_TOOL
    assert cases.why_expected("user", decisions.NO_TOOL) == ""
    assert cases.why_expected("tool", SEARCHED) == ""
