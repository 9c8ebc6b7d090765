"""Tests of chat.live_markdown: a streamed reply's finished blocks, rendered as they finish,
add up to the reply rendered whole, however the text was cut into chunks."""

from __future__ import annotations

import random

import pytest

from chat.live_markdown import LiveMarkdown, finished
from chat.rendering import markdown

REPLIES = [
    "Here is the plan:\n\n```python\nprint('hi')\n\nx = 1\n```\n\n| a | b |\n|---|---|\n"
    "| 1 | 2 |\n\n- one\n- two\n\n1. first\n\n2. second\n\nThe end *really*.",
    "Title\n=====\n\nSub\n---\n\n> quote\nlazy line\n\n> more\n\n- a\n  - nested\n\n"
    "    indented in item\n- b\n\ncode:\n\n    x = 1\n\n    y = 2\n\nafter",
    "Para line one\nline two\n| a | b |\n|---|---|\n| 1 | 2 |\nnext para\n\n***\n\n~~~\n"
    "fence ~~~ tilde\n~~~\n\n1) one\n2) two\n\n3) three",
    "Text with `code` and **bold** <b>not html</b>\n\n```\nunclosed fence\n\nstill code",
    "\n\nAfter a tool round.\n\n- item\n\n  continued para in item\n\nend",
]


@pytest.mark.parametrize("reply", REPLIES)
def test_streamed_blocks_add_up_to_the_reply_rendered_whole(reply: str) -> None:
    chunks = random.Random(reply)
    for _ in range(200):
        live, at = LiveMarkdown(), 0
        while at < len(reply):
            size = chunks.randint(1, 9)
            live.add(reply[at : at + size])
            at += size
        assert "".join(live.html) + markdown(live.tail) == markdown(reply)


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        ("", 0),
        ("One paragraph being written", 0),
        ("Done.\n\nNext", 7),  # nothing more on "Next"'s line could join it to "Done."
        ("Done.\n\nNext\n", 7),
        ("1. first\n\n2", 0),  # "2" may yet be "2. second", an item of the list above
        ("1. first\n\n2 apples\n", 10),  # its line is whole: it was not
        ("- a\n\n  b", 0),  # indented: the item's second paragraph, perhaps
        ("```\ncode\n\nmore code\n", 0),  # an open fence is one block to the end
        ("```\ncode\n```\nafter\n", 13),
        ("| a | b |\n|---|---|\n| 1 | 2 |\n", 0),  # a table takes rows until something else
        ("Done.\r\n\r\nNext\r\n", 0),
    ],
)
def test_finished(text: str, cut: int) -> None:
    assert finished(text) == cut


def test_a_resumed_runs_earlier_text_is_rendered_whole_and_raw_text_stays_text() -> None:
    live = LiveMarkdown("Earlier *reply*")
    assert live.html == [markdown("Earlier *reply*")] and live.tail == ""
    assert live.add("\n\n<script>alert(1)</script>\n\nmore\n") is not None
    assert "<script>" not in "".join(live.html) and "&lt;script&gt;" in "".join(live.html)
