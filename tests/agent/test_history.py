"""Tests of chat.agent.history: the strict tool-call history rules and the passes that fix them."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from chat.agent.history import (
    DUPLICATE_TOOL_CALL_ID,
    DUPLICATE_TOOL_REPLY,
    EMPTY_TOOL_CALL_ID,
    EMPTY_TOOL_CALL_NAME,
    ORPHAN_TOOL_MESSAGE,
    RULES,
    UNANSWERED_REASON,
    UNANSWERED_TOOL_CALL,
    UNFIXABLE_RULES,
    HistoryViolation,
    answer_dangling_tool_calls,
    drop_orphan_tool_messages,
    error_reply,
    pending_tool_calls,
    repair,
    validate,
)
from chat.agent.messages import ChatMessage, ToolCall


def user(text: str = "hi") -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str = "ok") -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def calls(*ids: str, name: str = "get_current_time") -> ChatMessage:
    return ChatMessage(role="assistant", tool_calls=tuple(ToolCall(id=i, name=name) for i in ids))


def tool(call_id: str, content: str = '{"ok": true}') -> ChatMessage:
    return ChatMessage(role="tool", content=content, tool_call_id=call_id)


def rules(messages: Sequence[ChatMessage], **kwargs: bool) -> list[tuple[int, str]]:
    return [(v.index, v.rule) for v in validate(messages, **kwargs)]


def shape(messages: Sequence[ChatMessage]) -> list[str]:
    """Compact view: role, plus the id for tool messages."""
    return [m.role if m.role != "tool" else f"tool:{m.tool_call_id}" for m in messages]


# --- rules and violations -------------------------------------------------------------------


def test_rules_names_every_rule() -> None:
    assert RULES.unanswered_tool_call == "unanswered_tool_call"
    assert RULES.orphan_tool_message == "orphan_tool_message"
    assert RULES.duplicate_tool_reply == "duplicate_tool_reply"
    assert RULES.duplicate_tool_call_id == "duplicate_tool_call_id"
    assert RULES.empty_tool_call_name == "empty_tool_call_name"
    assert set(RULES) >= {
        UNANSWERED_TOOL_CALL,
        ORPHAN_TOOL_MESSAGE,
        DUPLICATE_TOOL_REPLY,
        DUPLICATE_TOOL_CALL_ID,
        EMPTY_TOOL_CALL_NAME,
        EMPTY_TOOL_CALL_ID,
    }
    assert len(set(RULES)) == len(RULES)
    assert set(RULES) >= UNFIXABLE_RULES


def test_violation_str_names_index_role_rule_and_detail() -> None:
    violation = HistoryViolation(
        3, ORPHAN_TOOL_MESSAGE, "tool_call_id 'call_9' answers no pending tool call", "tool"
    )
    assert str(violation) == (
        "message 3 (tool): orphan_tool_message: tool_call_id 'call_9' answers no pending tool call"
    )


def test_violation_str_without_role() -> None:
    assert str(HistoryViolation(0, "x", "y")) == "message 0: x: y"


def test_validate_str_of_real_orphan_matches_format() -> None:
    [violation] = validate([user(), calls("call_1"), tool("call_1"), tool("call_9")])
    assert str(violation).startswith(
        "message 3 (tool): orphan_tool_message: tool_call_id 'call_9' answers no pending tool call"
    )


def test_violation_is_frozen() -> None:
    violation = HistoryViolation(1, UNANSWERED_TOOL_CALL, "x")
    with pytest.raises(AttributeError):
        violation.index = 2  # type: ignore[misc]


# --- validate -------------------------------------------------------------------------------


def test_empty_history_is_valid() -> None:
    assert validate([]) == []


def test_plain_conversation_is_valid() -> None:
    history = [ChatMessage(role="system", content="be brief"), user(), assistant(), user("again")]
    assert validate(history) == []


def test_answered_round_is_valid() -> None:
    assert validate([user(), calls("a"), tool("a"), assistant()]) == []


def test_parallel_calls_answered_out_of_order_are_valid() -> None:
    history = [user(), calls("a", "b", "c"), tool("c"), tool("a"), tool("b"), assistant()]
    assert validate(history) == []


def test_several_rounds_are_valid() -> None:
    history = [user(), calls("a"), tool("a"), calls("b", "c"), tool("b"), tool("c"), assistant()]
    assert validate(history) == []


def test_unanswered_call_at_end_is_reported_on_the_assistant_message() -> None:
    history = [user(), calls("a", "b"), tool("a")]
    [violation] = validate(history)
    assert (violation.index, violation.rule, violation.role) == (
        1,
        UNANSWERED_TOOL_CALL,
        "assistant",
    )
    assert "'b'" in violation.detail
    assert "end of the history" in violation.detail


def test_unanswered_call_before_next_message_names_that_message() -> None:
    history = [user(), calls("a", "b"), tool("b"), user("next")]
    [violation] = validate(history)
    assert (violation.index, violation.rule) == (1, UNANSWERED_TOOL_CALL)
    assert "'a'" in violation.detail
    assert "message 3" in violation.detail


def test_reply_after_an_intervening_message_does_not_count() -> None:
    history = [user(), calls("a"), assistant("thinking"), tool("a")]
    assert rules(history) == [(1, UNANSWERED_TOOL_CALL), (3, ORPHAN_TOOL_MESSAGE)]


def test_every_unanswered_call_is_reported() -> None:
    history = [user(), calls("a", "b", "c"), user()]
    violations = validate(history)
    assert [v.rule for v in violations] == [UNANSWERED_TOOL_CALL] * 3
    assert ["'a'" in violations[0].detail, "'b'" in violations[1].detail] == [True, True]
    assert "'c'" in violations[2].detail


def test_allow_trailing_pending_accepts_a_paused_round() -> None:
    history = [user(), calls("a", "b"), tool("a")]
    assert validate(history, allow_trailing_pending=True) == []


def test_allow_trailing_pending_still_reports_closed_rounds() -> None:
    history = [user(), calls("x"), user("again"), calls("a"), tool("a")]
    assert rules(history, allow_trailing_pending=True) == [(1, UNANSWERED_TOOL_CALL)]
    assert rules([*history[:3], calls("a")], allow_trailing_pending=True) == [
        (1, UNANSWERED_TOOL_CALL)
    ]


def test_allow_trailing_pending_still_reports_orphans_in_the_trailing_round() -> None:
    history = [user(), calls("a", "b"), tool("zzz")]
    assert rules(history, allow_trailing_pending=True) == [(2, ORPHAN_TOOL_MESSAGE)]


def test_orphan_tool_message_first_in_history() -> None:
    [violation] = validate([tool("call_9"), user()])
    assert (violation.index, violation.rule, violation.role) == (0, ORPHAN_TOOL_MESSAGE, "tool")
    assert "'call_9'" in violation.detail
    assert "no assistant tool_calls block" in violation.detail


def test_tool_message_after_assistant_without_tool_calls_is_orphan() -> None:
    assert rules([user(), assistant(), tool("a")]) == [(2, ORPHAN_TOOL_MESSAGE)]


def test_tool_message_with_unknown_id_is_orphan() -> None:
    history = [user(), calls("a"), tool("a"), tool("b")]
    [violation] = validate(history)
    assert (violation.index, violation.rule) == (3, ORPHAN_TOOL_MESSAGE)
    assert "message 1" in violation.detail


def test_reply_to_a_call_of_an_earlier_block_is_orphan() -> None:
    history = [user(), calls("a"), tool("a"), calls("b"), tool("b"), tool("a")]
    assert rules(history) == [(5, ORPHAN_TOOL_MESSAGE)]


def test_duplicate_tool_reply() -> None:
    history = [user(), calls("a", "b"), tool("a"), tool("b"), tool("a", "again")]
    [violation] = validate(history)
    assert (violation.index, violation.rule, violation.role) == (4, DUPLICATE_TOOL_REPLY, "tool")
    assert "'a'" in violation.detail


def test_duplicate_tool_call_id_across_rounds() -> None:
    history = [user(), calls("a"), tool("a"), user(), calls("a"), tool("a")]
    [violation] = validate(history)
    assert (violation.index, violation.rule, violation.role) == (
        4,
        DUPLICATE_TOOL_CALL_ID,
        "assistant",
    )
    assert "'a'" in violation.detail


def test_duplicate_tool_call_id_within_one_block() -> None:
    history = [user(), calls("a", "a"), tool("a")]
    assert rules(history) == [(1, DUPLICATE_TOOL_CALL_ID)]


def test_empty_tool_call_name() -> None:
    history = [user(), calls("a", name=""), tool("a")]
    [violation] = validate(history)
    assert (violation.index, violation.rule) == (1, EMPTY_TOOL_CALL_NAME)
    assert "'a'" in violation.detail


def test_empty_tool_call_id_is_reported_once_not_as_unanswered() -> None:
    history = [user(), calls(""), user()]
    assert rules(history) == [(1, EMPTY_TOOL_CALL_ID)]


def test_violations_are_sorted_by_index() -> None:
    history = [tool("x"), user(), calls("a", "b"), tool("b"), tool("b"), user(), tool("y")]
    assert rules(history) == [
        (0, ORPHAN_TOOL_MESSAGE),
        (2, UNANSWERED_TOOL_CALL),
        (4, DUPLICATE_TOOL_REPLY),
        (6, ORPHAN_TOOL_MESSAGE),
    ]


def test_validate_accepts_a_tuple() -> None:
    assert rules((user(), calls("a"))) == [(1, UNANSWERED_TOOL_CALL)]


# --- pending_tool_calls ---------------------------------------------------------------------


def test_pending_tool_calls_of_a_paused_round() -> None:
    history = [user(), calls("a", "b", "c"), tool("b")]
    assert [call.id for call in pending_tool_calls(history)] == ["a", "c"]


def test_pending_tool_calls_is_empty_when_round_is_closed_or_complete() -> None:
    assert pending_tool_calls([user(), calls("a"), user()]) == []
    assert pending_tool_calls([user(), calls("a"), tool("a")]) == []
    assert pending_tool_calls([user()]) == []
    assert pending_tool_calls([]) == []


# --- drop_orphan_tool_messages --------------------------------------------------------------


def test_drop_orphans_removes_orphans_and_duplicates_keeping_the_first_reply() -> None:
    first = tool("a", "first")
    history = [tool("x"), user(), calls("a"), first, tool("a", "second"), tool("zz"), assistant()]
    result = drop_orphan_tool_messages(history)
    assert shape(result) == ["user", "assistant", "tool:a", "assistant"]
    assert result[2] is first


def test_drop_orphans_removes_reply_after_an_intervening_message() -> None:
    history = [user(), calls("a"), user("wait"), tool("a")]
    assert shape(drop_orphan_tool_messages(history)) == ["user", "assistant", "user"]


def test_drop_orphans_keeps_a_valid_history_unchanged() -> None:
    history = [user(), calls("a", "b"), tool("b"), tool("a"), assistant()]
    result = drop_orphan_tool_messages(history)
    assert result == history
    assert all(new is old for new, old in zip(result, history, strict=True))


def test_drop_orphans_does_not_answer_dangling_calls() -> None:
    history = [user(), calls("a", "b"), tool("a")]
    assert drop_orphan_tool_messages(history) == history


# --- answer_dangling_tool_calls -------------------------------------------------------------


def test_answer_dangling_adds_default_error_reply_at_end() -> None:
    history = [user(), calls("a")]
    result = answer_dangling_tool_calls(history)
    assert shape(result) == ["user", "assistant", "tool:a"]
    added = result[2]
    assert added.content is not None
    assert json.loads(added.content) == {"error": UNANSWERED_REASON}
    assert "cancelled" in json.loads(added.content)["error"]


def test_answer_dangling_cancelled_round_with_some_answers() -> None:
    answered = tool("b", "done")
    history = [user(), calls("a", "b", "c"), answered, user("stop"), assistant()]
    result = answer_dangling_tool_calls(history)
    assert shape(result) == ["user", "assistant", "tool:b", "tool:a", "tool:c", "user", "assistant"]
    assert result[2] is answered
    assert validate(result) == []


def test_answer_dangling_places_replies_after_each_block() -> None:
    history = [user(), calls("a"), user(), calls("b", "c"), tool("c")]
    result = answer_dangling_tool_calls(history)
    assert shape(result) == ["user", "assistant", "tool:a", "user", "assistant", "tool:c", "tool:b"]


def test_answer_dangling_uses_the_reply_callable() -> None:
    seen: list[ToolCall] = []

    def reply(call: ToolCall) -> str:
        seen.append(call)
        return f"cancelled by the user ({call.name})"

    history = [user(), calls("a", "b", name="search"), tool("a")]
    result = answer_dangling_tool_calls(history, reply=reply)
    assert [call.id for call in seen] == ["b"]
    assert result[-1].content == "cancelled by the user (search)"
    assert result[-1].tool_call_id == "b"


def test_error_reply_factory() -> None:
    result = answer_dangling_tool_calls(
        [user(), calls("a")], reply=error_reply("interrupted: the server stopped")
    )
    content = result[-1].content
    assert content is not None
    assert json.loads(content) == {"error": "interrupted: the server stopped"}


def test_answer_dangling_answers_a_duplicated_id_once() -> None:
    result = answer_dangling_tool_calls([user(), calls("a", "a")])
    assert shape(result) == ["user", "assistant", "tool:a"]


def test_answer_dangling_skips_calls_with_an_empty_id() -> None:
    result = answer_dangling_tool_calls([user(), calls("", "b")])
    assert shape(result) == ["user", "assistant", "tool:b"]


def test_answer_dangling_is_idempotent_and_noop_on_valid_history() -> None:
    history = [user(), calls("a"), tool("a"), assistant()]
    assert answer_dangling_tool_calls(history) == history
    once = answer_dangling_tool_calls([user(), calls("a", "b")])
    assert answer_dangling_tool_calls(once) == once


def test_answer_dangling_does_not_drop_orphans() -> None:
    orphan = tool("zz")
    result = answer_dangling_tool_calls([user(), calls("a"), orphan])
    assert shape(result) == ["user", "assistant", "tool:zz", "tool:a"]
    assert result[2] is orphan


# --- repair ---------------------------------------------------------------------------------


def test_repair_drops_orphans_then_answers_dangling_calls() -> None:
    history = [
        tool("ghost"),
        user(),
        calls("a", "b", "c"),
        tool("c"),
        tool("c", "dup"),
        tool("nope"),
        user("stop"),
        tool("a", "late"),
        assistant(),
    ]
    result = repair(history)
    assert shape(result) == ["user", "assistant", "tool:c", "tool:a", "tool:b", "user", "assistant"]
    assert validate(result) == []


def test_repair_passes_reply_through() -> None:
    result = repair([user(), calls("a")], reply=lambda call: f"interrupted {call.id}")
    assert result[-1].content == "interrupted a"


@pytest.mark.parametrize(
    "history",
    [
        [],
        [user()],
        [tool("x")],
        [tool("x"), tool("y"), user()],
        [user(), calls("a", "b"), tool("b")],
        [user(), calls("a", "b"), tool("b"), tool("b"), tool("q"), user()],
        [user(), calls("a"), assistant(), tool("a"), calls("b"), user(), calls("c"), tool("c")],
        [calls("a"), calls("b"), calls("c")],
        [user(), calls("a"), tool("a"), calls("b", "c"), tool("c"), tool("a")],
    ],
)
def test_repair_output_is_valid(history: list[ChatMessage]) -> None:
    result = repair(history)
    assert validate(result) == []
    assert repair(result) == result


def test_repair_leaves_unfixable_violations_only() -> None:
    history = [user(), calls("a"), tool("a"), calls("a", name=""), calls(""), tool("zz")]
    result = repair(history)
    remaining = {v.rule for v in validate(result)}
    assert remaining == {DUPLICATE_TOOL_CALL_ID, EMPTY_TOOL_CALL_NAME, EMPTY_TOOL_CALL_ID}
    assert remaining <= UNFIXABLE_RULES


# --- identity and immutability --------------------------------------------------------------


HISTORY_NEEDING_REPAIR = [
    tool("ghost"),
    ChatMessage(role="system", content="sys"),
    user(),
    calls("a", "b"),
    tool("b"),
    tool("b", "dup"),
    user("stop"),
    calls("c"),
]


@pytest.mark.parametrize(
    "history_pass", [drop_orphan_tool_messages, answer_dangling_tool_calls, repair]
)
def test_passes_keep_identity_of_unchanged_messages_and_do_not_mutate_input(
    history_pass: object,
) -> None:
    assert callable(history_pass)
    original = list(HISTORY_NEEDING_REPAIR)
    snapshot = [m.model_copy() for m in original]
    result = history_pass(original)
    assert original == snapshot
    assert all(a is b for a, b in zip(original, HISTORY_NEEDING_REPAIR, strict=True))
    assert result is not original
    input_ids = {id(m) for m in original}
    kept = [m for m in result if id(m) in input_ids]
    new = [m for m in result if id(m) not in input_ids]
    # every kept message is an input object, in input order
    positions = [next(i for i, o in enumerate(original) if o is m) for m in kept]
    assert positions == sorted(positions)
    # anything new is an added tool reply, never a copy of a kept message
    assert all(m.role == "tool" for m in new)
    assert not any(any(m == o for o in original) for m in new)


def test_repair_identity_in_detail() -> None:
    result = repair(HISTORY_NEEDING_REPAIR)
    h = HISTORY_NEEDING_REPAIR
    assert shape(result) == [
        "system",
        "user",
        "assistant",
        "tool:b",
        "tool:a",
        "user",
        "assistant",
        "tool:c",
    ]
    assert [result[i] is h[j] for i, j in [(0, 1), (1, 2), (2, 3), (3, 4), (5, 6), (6, 7)]] == [
        True
    ] * 6
    assert result[4] not in h
    assert result[7] not in h


def test_passes_return_a_new_list_even_when_nothing_changes() -> None:
    history = [user(), assistant()]
    for history_pass in (drop_orphan_tool_messages, answer_dangling_tool_calls, repair):
        result = history_pass(history)
        assert result == history
        assert result is not history
        result.append(user())
        assert len(history) == 2
