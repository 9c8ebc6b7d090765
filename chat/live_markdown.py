"""A streaming reply's Markdown, rendered a block at a time as each block is finished.

While a reply streams, the page shows its finished blocks as HTML and only the block being
written as raw text: a code fence turns into a code block once it is closed and the next block
begins, a table once its last row is followed by something else. A block is finished when a
later top-level block has begun: text appended after it can no longer change it (a list item,
a table row or a lazy line would have joined the last block, which is still raw). The finished
reply is rendered whole as before, so the page does not change when it ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.utils.html import escape
from django.utils.safestring import SafeString

from chat.rendering import markdown, parse
from chat.templatetags.chat_tags import fragment_id

JOINING = frozenset(" \t-+*=|>0123456789")
"""What a line may begin with and still join the block above it once it is longer: a list
item or its indented text ("2" of "2. second"), an indented code line, a setext underline, a
table row, a quote."""


def finished(text: str) -> int:
    """How much of `text` is whole blocks: up to where its last top-level block starts, once
    nothing more on that block's first line could make it part of the block above (its line is
    whole, or begins with a letter or other character no continuation begins with); 0 when
    there is no such cut, or when `text` holds a carriage return, which the parser would count
    apart."""
    if "\r" in text:
        return 0
    tokens = parse(text)
    starts = [
        token.map[0] for token in tokens if token.level == 0 and token.nesting >= 0 and token.map
    ]
    if len(starts) < 2:
        return 0
    offset = 0
    for _ in range(starts[-1]):
        offset = text.index("\n", offset) + 1
    rest = text[offset:]
    return offset if "\n" in rest or rest[:1] not in JOINING else 0


class LiveMarkdown:
    """The text streamed so far: its finished blocks as sanitized HTML, the rest raw."""

    def __init__(self, done: str = "") -> None:
        """`done`: text already finished (a resumed run's earlier replies), rendered whole."""
        self.html: list[SafeString] = [markdown(done)] if done else []
        self.tail = ""

    def add(self, chunk: str) -> SafeString | None:
        """Take the next chunk of text; the HTML of the blocks it finished, if it finished any.

        Only a chunk that holds a line break or begins a line can finish a block (see
        `finished`), and only the unfinished tail is parsed again."""
        begins_line = self.tail.endswith("\n")
        self.tail += chunk
        if "\n" not in chunk and not begins_line:
            return None
        cut = finished(self.tail)
        if not cut:
            return None
        done, self.tail = self.tail[:cut], self.tail[cut:]
        html = markdown(done)
        self.html.append(html)
        return html


@dataclass
class LiveText:
    """A run's streamed text and reasoning as published so far, and the frames that add to
    them on the page."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    markdown: LiveMarkdown = field(default_factory=LiveMarkdown)
    """The text as the page shows it: finished blocks rendered, the one being written raw."""

    def frames(self, pending: Iterable[tuple[str, str]], key: int) -> str:
        """The out-of-band swaps of the deltas `pending` ("text" or "reasoning", a chunk) of
        run `key`: appended raw, except that blocks the text finishes join the rendered part
        and the raw part is replaced by the block being written."""
        parts = []
        for kind, chunk in _merge(pending):
            getattr(self, kind).append(chunk)
            target = fragment_id("reply", key, kind)
            done = self.markdown.add(chunk) if kind == "text" else None
            if done is None:
                parts.append(f'<span id="{target}" hx-swap-oob="beforeend">{escape(chunk)}</span>')
                continue
            rendered = fragment_id("reply", key, "done")
            parts.append(f'<div id="{rendered}" hx-swap-oob="beforeend">{done}</div>')
            tail = escape(self.markdown.tail)
            parts.append(f'<span id="{target}" hx-swap-oob="innerHTML">{tail}</span>')
        return "".join(parts)


def _merge(pending: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Consecutive deltas of one kind as one."""
    merged: list[tuple[str, str]] = []
    for kind, text in pending:
        if merged and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + text)
        else:
            merged.append((kind, text))
    return merged
