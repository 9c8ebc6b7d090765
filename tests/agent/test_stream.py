from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from chat.agent.errors import StreamError
from chat.agent.events import ReasoningDelta, StreamItem, TextDelta, Usage
from chat.agent.messages import ChatMessage, ToolCall
from chat.agent.stream import ChatCompletionStreamParser, sse_lines


def choice_chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def fragment(index: int | None = None, **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {} if index is None else {"index": index}
    if "id" in fields:
        data["id"] = fields.pop("id")
    data["function"] = fields
    return data


def feed(parser: ChatCompletionStreamParser, *chunks: dict[str, Any]) -> list[StreamItem]:
    """Feed chunks as an SSE stream would carry them: a data line and a blank line each."""
    items: list[StreamItem] = []
    for chunk in chunks:
        items += parser.feed_line(f"data: {json.dumps(chunk)}")
        items += parser.feed_line("")
    return items


def test_text_deltas_assemble_the_message() -> None:
    parser = ChatCompletionStreamParser()
    items = feed(
        parser,
        choice_chunk({"role": "assistant", "content": ""}),
        choice_chunk({"content": "Hel"}),
        choice_chunk({"content": "lo"}),
        choice_chunk({}, "stop"),
    )
    parser.feed_line("data: [DONE]")

    assert items == [TextDelta("Hel"), TextDelta("lo")]
    turn = parser.finish()
    assert turn.message == ChatMessage(role="assistant", content="Hello")
    assert turn.finish_reason == "stop"
    assert parser.done


def test_tool_call_fragments_are_joined_by_index() -> None:
    parser = ChatCompletionStreamParser()
    items = feed(
        parser,
        choice_chunk({"role": "assistant", "content": None}),
        choice_chunk({"tool_calls": [fragment(0, id="call_a", name="get_time", arguments="")]}),
        choice_chunk({"tool_calls": [fragment(0, arguments='{"timez')]}),
        choice_chunk({"tool_calls": [fragment(0, arguments='one": "UTC"}')]}),
        choice_chunk({}, "tool_calls"),
    )

    assert items == []
    turn = parser.finish()
    assert turn.message.tool_calls == (
        ToolCall(id="call_a", name="get_time", arguments='{"timezone": "UTC"}'),
    )
    assert turn.message.content is None
    assert turn.finish_reason == "tool_calls"


def test_parallel_calls_interleaved_come_out_in_index_order() -> None:
    parser = ChatCompletionStreamParser()
    feed(
        parser,
        choice_chunk({"tool_calls": [fragment(1, id="call_b", name="note", arguments="")]}),
        choice_chunk({"tool_calls": [fragment(0, id="call_a", name="clock", arguments="{")]}),
        choice_chunk({"tool_calls": [fragment(1, arguments='{"note": ')]}),
        choice_chunk({"tool_calls": [fragment(0, arguments="}")]}),
        choice_chunk({"tool_calls": [fragment(1, arguments='"x"}')]}),
        choice_chunk({}, "tool_calls"),
    )

    assert parser.tool_calls == (
        ToolCall(id="call_a", name="clock", arguments="{}"),
        ToolCall(id="call_b", name="note", arguments='{"note": "x"}'),
    )


def test_fragments_without_index_follow_their_id_or_the_last_call() -> None:
    parser = ChatCompletionStreamParser()
    feed(
        parser,
        choice_chunk({"tool_calls": [fragment(id="call_a", name="one", arguments='{"a"')]}),
        choice_chunk({"tool_calls": [fragment(arguments=": 1}")]}),
        choice_chunk({"tool_calls": [fragment(id="call_b", name="two", arguments="{")]}),
        choice_chunk({"tool_calls": [fragment(id="call_a", arguments="")]}),
        choice_chunk({"tool_calls": [fragment(id="call_b", arguments="}")]}),
        choice_chunk({}, "tool_calls"),
    )

    assert parser.tool_calls == (
        ToolCall(id="call_a", name="one", arguments='{"a": 1}'),
        ToolCall(id="call_b", name="two", arguments="{}"),
    )


def test_a_new_id_and_name_on_a_reused_index_starts_another_call() -> None:
    parser = ChatCompletionStreamParser()
    feed(
        parser,
        choice_chunk({"tool_calls": [fragment(0, id="call_a", name="one", arguments="{}")]}),
        choice_chunk({"tool_calls": [fragment(0, id="call_b", name="two", arguments="{}")]}),
        choice_chunk({}, "tool_calls"),
    )

    assert [call.id for call in parser.tool_calls] == ["call_a", "call_b"]


def test_a_call_without_id_gets_a_stable_generated_one() -> None:
    parser = ChatCompletionStreamParser()
    feed(
        parser,
        choice_chunk({"tool_calls": [fragment(0, name="clock", arguments="{}")]}),
        choice_chunk({}, "tool_calls"),
    )

    generated = parser.tool_calls[0].id
    assert re.fullmatch(r"call_[0-9a-f]{24}", generated)
    assert parser.finish().message.tool_calls[0].id == generated


def test_repeated_name_and_object_arguments_are_tolerated() -> None:
    parser = ChatCompletionStreamParser()
    feed(
        parser,
        choice_chunk({"tool_calls": [fragment(0, id="c", name="clock", arguments="")]}),
        choice_chunk({"tool_calls": [fragment(0, name="clock", arguments={"tz": "UTC"})]}),
        choice_chunk({}, "tool_calls"),
    )

    assert parser.tool_calls == (ToolCall(id="c", name="clock", arguments='{"tz": "UTC"}'),)


def test_tool_calls_with_finish_reason_stop_still_count() -> None:
    parser = ChatCompletionStreamParser()
    feed(
        parser,
        choice_chunk({"content": "Let me check."}),
        choice_chunk({"tool_calls": [fragment(0, id="call_a", name="clock", arguments="{}")]}),
        choice_chunk({}, "stop"),
    )

    turn = parser.finish()
    assert turn.finish_reason == "stop"
    assert turn.message.content == "Let me check."
    assert [call.name for call in turn.message.tool_calls] == ["clock"]


def test_legacy_function_call_counts_as_a_tool_call() -> None:
    parser = ChatCompletionStreamParser()
    feed(
        parser,
        choice_chunk({"function_call": {"name": "clock", "arguments": "{"}}),
        choice_chunk({"function_call": {"arguments": "}"}}),
        choice_chunk({}, "function_call"),
    )

    turn = parser.finish()
    assert turn.finish_reason == "tool_calls"
    assert [(call.name, call.arguments) for call in turn.message.tool_calls] == [("clock", "{}")]


def test_the_first_finish_reason_wins() -> None:
    parser = ChatCompletionStreamParser()
    feed(parser, choice_chunk({"content": "x"}, "length"), choice_chunk({}, "stop"))

    assert parser.finish().finish_reason == "length"


@pytest.mark.parametrize("choices", [[], None, "missing"])
def test_usage_chunk_with_empty_null_or_missing_choices(choices: Any) -> None:
    chunk: dict[str, Any] = {"usage": {"prompt_tokens": 7, "completion_tokens": 3}}
    if choices != "missing":
        chunk["choices"] = choices
    parser = ChatCompletionStreamParser()

    assert feed(parser, chunk) == [Usage(prompt_tokens=7, completion_tokens=3, total_tokens=10)]


def test_usage_total_is_taken_as_given() -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 12}

    assert ChatCompletionStreamParser().feed_chunk({"choices": [], "usage": usage}) == [
        Usage(7, 3, 12)
    ]


def test_usage_null_on_normal_chunks_is_ignored() -> None:
    parser = ChatCompletionStreamParser()
    items = feed(parser, {**choice_chunk({"content": "hi"}), "usage": None})

    assert items == [TextDelta("hi")]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_deltas(field: str) -> None:
    parser = ChatCompletionStreamParser()
    items = feed(
        parser,
        choice_chunk({field: "think"}),
        choice_chunk({field: "ing"}),
        choice_chunk({"content": "Answer"}),
        choice_chunk({}, "stop"),
    )

    assert items == [ReasoningDelta("think"), ReasoningDelta("ing"), TextDelta("Answer")]
    assert parser.finish().message.reasoning == "thinking"


def test_reasoning_sent_under_both_names_counts_once() -> None:
    parser = ChatCompletionStreamParser()
    items = feed(parser, choice_chunk({"reasoning_content": "hm", "reasoning": "hm"}))

    assert items == [ReasoningDelta("hm")]
    assert parser.reasoning == "hm"


def test_comments_other_fields_and_unknown_keys_are_ignored() -> None:
    parser = ChatCompletionStreamParser()
    items: list[StreamItem] = []
    for line in [
        ": OPENROUTER PROCESSING",
        "event: message",
        "id: 42",
        "retry: 1000",
        "",
        'data: {"choices": [{"index": 0, "delta": {"content": "ok", "x_extra": 1}, '
        '"logprobs": null}], "system_fingerprint": "fp", "x_groq": {"id": "q"}}',
        "",
    ]:
        items += parser.feed_line(line)

    assert items == [TextDelta("ok")]


def test_only_choice_zero_counts() -> None:
    parser = ChatCompletionStreamParser()
    chunk = {
        "choices": [
            {"index": 1, "delta": {"content": "other"}, "finish_reason": "length"},
            {"index": 0, "delta": {"content": "mine"}, "finish_reason": "stop"},
        ]
    }

    assert parser.feed_chunk(chunk) == [TextDelta("mine")]
    assert parser.finish_reason == "stop"


def test_multi_line_data_forms_one_document() -> None:
    parser = ChatCompletionStreamParser()
    items: list[StreamItem] = []
    for line in ['data: {"choices": [{"index": 0,', 'data: "delta": {"content": "hi"}}]}', ""]:
        items += parser.feed_line(line)

    assert items == [TextDelta("hi")]


def test_data_without_space_and_crlf_endings() -> None:
    parser = ChatCompletionStreamParser()
    items = parser.feed_line('data:{"choices":[{"index":0,"delta":{"content":"hi"}}]}\r')
    parser.feed_line("\r")
    parser.feed_line("data:[DONE]")

    assert items == [TextDelta("hi")]
    assert parser.done


def test_done_marks_the_end_and_finish_does_not_need_it() -> None:
    parser = ChatCompletionStreamParser()
    feed(parser, choice_chunk({"content": "hi"}, "stop"))

    assert not parser.done
    assert parser.finish().message.content == "hi"
    parser.feed_line("data: [DONE]")
    assert parser.done


def test_malformed_json_keeps_the_partial_text() -> None:
    parser = ChatCompletionStreamParser()
    feed(parser, choice_chunk({"reasoning": "hm"}), choice_chunk({"content": "Half an"}))
    parser.feed_line('data: {"choices": [{"delta": {"content": " ans')

    with pytest.raises(StreamError, match="malformed") as caught:
        parser.feed_line("")
    assert caught.value.partial == ChatMessage(role="assistant", content="Half an", reasoning="hm")


def test_malformed_line_followed_by_a_valid_one_is_reported() -> None:
    parser = ChatCompletionStreamParser()
    parser.feed_line("data: {not json")

    with pytest.raises(StreamError, match="not json"):
        parser.feed_line('data: {"choices": []}')


def test_unfinished_event_at_the_end_is_malformed() -> None:
    parser = ChatCompletionStreamParser()
    feed(parser, choice_chunk({"content": "x"}, "stop"))
    parser.feed_line('data: {"choices": [')

    with pytest.raises(StreamError, match="malformed"):
        parser.finish()


@pytest.mark.parametrize(
    "chunk",
    [
        [1, 2],
        "text",
        {"choices": {"index": 0}},
        {"choices": ["x"]},
        {"choices": [{"index": 0, "delta": "x"}]},
        {"choices": [{"index": 0, "delta": {"content": 5}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": ["x"]}}]},
    ],
)
def test_malformed_chunks_raise_stream_error(chunk: Any) -> None:
    parser = ChatCompletionStreamParser()
    feed(parser, choice_chunk({"content": "so far"}))

    with pytest.raises(StreamError, match="malformed") as caught:
        feed(parser, chunk)
    assert caught.value.partial == ChatMessage(role="assistant", content="so far")


def test_stream_without_finish_keeps_text_and_reasoning_but_no_tool_calls() -> None:
    parser = ChatCompletionStreamParser()
    feed(
        parser,
        choice_chunk({"reasoning_content": "plan"}),
        choice_chunk({"content": "Calling"}),
        choice_chunk({"tool_calls": [fragment(0, id="call_a", name="clock", arguments='{"')]}),
    )

    with pytest.raises(StreamError, match="ended before a finish_reason") as caught:
        parser.finish()
    assert caught.value.partial == ChatMessage(
        role="assistant", content="Calling", reasoning="plan"
    )


def test_empty_stream_has_no_partial() -> None:
    parser = ChatCompletionStreamParser()

    assert parser.partial() is None
    with pytest.raises(StreamError) as caught:
        parser.finish()
    assert caught.value.partial is None


def test_error_event_mid_stream_carries_the_provider_message() -> None:
    parser = ChatCompletionStreamParser()
    feed(parser, choice_chunk({"content": "Once upon"}))

    with pytest.raises(StreamError, match="Upstream overloaded") as caught:
        feed(parser, {"error": {"message": "Upstream overloaded", "code": 502}})
    assert "502" in caught.value.message
    assert caught.value.partial == ChatMessage(role="assistant", content="Once upon")


def test_error_event_as_a_plain_string() -> None:
    with pytest.raises(StreamError, match="quota exceeded"):
        ChatCompletionStreamParser().feed_chunk({"error": "quota exceeded"})


async def _lines(chunks: list[bytes]) -> list[str]:
    async def arriving() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return [line async for line in sse_lines(arriving())]


BODY = (
    'data: {"a": "café ☕"}\n\n'
    'data: {"b":\r\n'
    "data: 2}\r\n\r\n"
    ": keep-alive\r"
    "\r"
    "data: [DONE]\n\n\r\n\r"
    "data: unfinished"
).encode()


@pytest.mark.parametrize("ending", [b"", b"\n", b"\r\n", b"\r"])
async def test_sse_lines_match_httpx_whatever_the_chunks(ending: bytes) -> None:
    """Every place a chunk may end (inside a CRLF, inside a UTF-8 character) gives the lines
    httpx's own decoding gives."""
    body = BODY + ending
    expected = [line async for line in httpx.Response(200, content=body).aiter_lines()]
    assert await _lines([body]) == expected
    for cut in range(1, len(body)):
        assert await _lines([body[:cut], body[cut:]]) == expected, cut
    assert await _lines([body[i : i + 1] for i in range(len(body))]) == expected
