"""Conversation titles proposed by the model: the request, and the answer cleaned into a title."""

from __future__ import annotations

import re
from collections.abc import Sequence

from .clients import ChatClient
from .contracts import AgentParameters
from .events import TextDelta
from .messages import ChatMessage

TITLE_CHARS = 60
"""The longest title a first message or a model gives (a user may rename it longer)."""
TITLE_INSTRUCTION = (
    "You name chat conversations. Reply with a short title for the conversation you are "
    "shown: at most six words, in the language of the conversation, on one line, without "
    "quotes, markdown or a final period. Reply with the title only."
)
FIRST_MESSAGE_CHARS = 2000
REPLY_CHARS = 1000
MAX_ANSWER_CHARS = 1000
"""A model that answers with an essay is not read past this: a title is in its first line."""

_THINKING = re.compile(r"<(think|thinking|reasoning)>.*?(?:</\1>|$)", re.S | re.I)
# A heading, a bullet, a block quote or a "Title:" label before the title.
_PREFIX = re.compile(r"^(?:#{1,6}\s+|[-*+•]\s+|>\s*|title\s*[:\uff1a]\s*)", re.I)
_WRAPPERS = "\"'`*_~“”„\u2018\u2019\u201a«»\u2039\u203a「」『』 \t"
_TRAILING = ".,;:。 "
_INLINE = re.compile(r"\*\*|__|`|~~")


def title_request(first_message: str, reply: str | None) -> list[ChatMessage]:
    """The messages that ask for a title: the instruction, then the first exchange, clipped."""
    shown = f"<user>\n{_clip(first_message, FIRST_MESSAGE_CHARS)}\n</user>"
    if reply and reply.strip():
        shown += f"\n\n<assistant>\n{_clip(reply, REPLY_CHARS)}\n</assistant>"
    return [
        ChatMessage(role="system", content=TITLE_INSTRUCTION),
        ChatMessage(role="user", content=f"Write a title for this conversation.\n\n{shown}"),
    ]


def clean_title(answer: str) -> str | None:
    """The model's answer as a title, or None when nothing is left.

    Reasoning blocks are dropped; the title is the first line with words left once headings,
    bullets, a "Title:" label, quotes, emphasis and a trailing period are gone; spaces
    collapse; a title over TITLE_CHARS is cut at a word and ends with "…".
    """
    for line in _THINKING.sub("", answer).splitlines():
        previous = None
        while line != previous:
            previous = line
            line = _PREFIX.sub("", line.strip(_WRAPPERS)).strip(_WRAPPERS).rstrip(_TRAILING)
        line = " ".join(_INLINE.sub("", line).split())
        if line:
            return _shorten(line)
    return None


def _shorten(title: str) -> str:
    if len(title) <= TITLE_CHARS:
        return title
    cut = title[: TITLE_CHARS - 1]
    word_end = cut.rfind(" ")
    if title[TITLE_CHARS - 1] != " " and word_end > TITLE_CHARS // 2:
        cut = cut[:word_end]  # not in the middle of a word
    return cut.rstrip(_TRAILING + "-\u2013\u2014") + "…"


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


async def propose_title(
    client: ChatClient, first_message: str, reply: str | None, *, model: str | None = None
) -> str | None:
    """Ask `client` (its model, or `model`) for a title; None when the answer makes none.

    The provider's errors (ChatClientError) are the caller's to handle. No tools are offered
    and only the model is set, so every endpoint that runs a conversation accepts the request.
    """
    messages: Sequence[ChatMessage] = title_request(first_message, reply)
    items = client.stream(messages, parameters=AgentParameters(model=model or None))
    answer: list[str] = []
    size = 0
    try:
        async for item in items:
            if isinstance(item, TextDelta):
                answer.append(item.text)
                size += len(item.text)
                if size > MAX_ANSWER_CHARS:
                    break
    finally:
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()
    return clean_title("".join(answer))
