"""Tests of chat.agent.titles (the request, the cleaning) and the scripted model's title rule."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from chat.agent.clients import OpenAICompatibleChatClient
from chat.agent.errors import ProviderHTTPError
from chat.agent.events import StreamItem, TextDelta
from chat.agent.scripted import ScriptedChatClient, scripted_title
from chat.agent.titles import (
    FIRST_MESSAGE_CHARS,
    MAX_ANSWER_CHARS,
    REPLY_CHARS,
    TITLE_CHARS,
    TITLE_INSTRUCTION,
    clean_title,
    propose_title,
    title_request,
)
from chat.testing.openai_script import error, text_turn
from chat.testing.openai_server import FakeOpenAIServer

PASTED = (
    "Please review the following Python function. It parses a CSV export of our orders and "
    "computes the monthly revenue per country, but the function is slow on big exports and "
    "the revenue totals for Germany look wrong.\n\n"
    "def revenue(rows):\n    totals = {}\n    for row in rows:\n        ...\n"
)


@pytest.mark.parametrize(
    ("answer", "title"),
    [
        ("Trip planning", "Trip planning"),
        ('"Trip planning."', "Trip planning"),
        ("“Trip planning”", "Trip planning"),
        ("'Trip planning'", "Trip planning"),
        ("**Trip planning**", "Trip planning"),
        ("Title: Trip planning.", "Trip planning"),
        ("**Title:** `Trip planning`", "Trip planning"),
        ("# Trip planning", "Trip planning"),
        ("- Trip planning", "Trip planning"),
        ("Trip **planning** for June", "Trip planning for June"),
        ("  Trip\tplanning  ", "Trip planning"),
        ("Trip planning\nThis conversation is about a trip.", "Trip planning"),
        ("\n\nTitle:\n\n Trip planning", "Trip planning"),
        ("<think>The user wants a trip.</think>\nTrip planning", "Trip planning"),
        ("What time is it in Paris?", "What time is it in Paris?"),
        ("Trip planning...", "Trip planning"),
    ],
)
def test_clean_title(answer: str, title: str) -> None:
    assert clean_title(answer) == title


@pytest.mark.parametrize("answer", ["", "   ", "\n\n", '""', "**", "Title:", "<think>hm"])
def test_an_answer_without_words_makes_no_title(answer: str) -> None:
    assert clean_title(answer) is None


def test_a_long_title_is_cut_at_a_word() -> None:
    answer = "A very long title about planning a trip to the mountains of northern Italy in June"
    title = clean_title(answer)
    assert title is not None and len(title) <= TITLE_CHARS
    assert title == "A very long title about planning a trip to the mountains of…"
    assert clean_title("x" * 100) == "x" * (TITLE_CHARS - 1) + "…"


def test_the_request_is_the_instruction_and_the_first_exchange_clipped() -> None:
    system, user = title_request("  " + "q" * 5000, "a" * 5000)

    assert (system.role, system.content) == ("system", TITLE_INSTRUCTION)
    assert user.role == "user" and user.content is not None
    assert "q" * FIRST_MESSAGE_CHARS + "…" in user.content
    assert "q" * (FIRST_MESSAGE_CHARS + 1) not in user.content
    assert "a" * REPLY_CHARS + "…" in user.content
    assert "a" * (REPLY_CHARS + 1) not in user.content
    assert user.content.index("<user>") < user.content.index("<assistant>")


def test_the_request_without_a_reply_shows_the_first_message_only() -> None:
    _, user = title_request("Plan my trip", None)
    assert user.content is not None
    assert "<user>\nPlan my trip\n</user>" in user.content and "<assistant>" not in user.content


async def test_propose_title_collects_the_text_offers_no_tools_and_cleans_it() -> None:
    client = ScriptedChatClient(['"Trip to Italy."'])

    title = await propose_title(client, "Plan a trip to Italy", "Sure!", model="other-model")

    assert title == "Trip to Italy"
    (body,) = client.requests
    assert body["model"] == "other-model"
    assert "tools" not in body and "temperature" not in body and "max_tokens" not in body
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


class Endless:
    """A model that never stops talking: a title must come from what it said first."""

    model = label = "endless"

    def __init__(self) -> None:
        self.sent = 0
        self.closed = False

    async def stream(self, messages: Any, **_: Any) -> AsyncIterator[StreamItem]:
        try:
            while True:
                self.sent += 1
                yield TextDelta("Trip planning " if self.sent == 1 else "and more words ")
        finally:
            self.closed = True

    async def aclose(self) -> None:
        return None


async def test_propose_title_stops_reading_an_essay() -> None:
    client = Endless()

    title = await propose_title(client, "Plan a trip", None)

    assert title == "Trip planning and more words and more words and more words…"
    assert client.closed and client.sent * len("and more words ") < 2 * MAX_ANSWER_CHARS


async def test_propose_title_over_http_passes_a_strict_server(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.enqueue(text_turn("Revenue function review"), error(400, "bad model"))
    client = OpenAICompatibleChatClient(base_url=fake_openai.base_url, model="m-1", backoff=0)
    try:
        assert await propose_title(client, PASTED, "It sums every row twice.") == (
            "Revenue function review"
        )
        with pytest.raises(ProviderHTTPError):
            await propose_title(client, PASTED, None)
    finally:
        await client.aclose()
    body = fake_openai.requests[0].body
    assert body["model"] == "m-1" and body["stream"] is True
    assert PASTED.strip()[:100] in body["messages"][1]["content"]


def test_the_scripted_title_of_a_short_first_message_is_the_message() -> None:
    assert scripted_title("what time is it?") == "what time is it?"
    assert scripted_title("  time   and\nnote ") == "time and note"
    assert scripted_title("   ") is None


def test_the_scripted_title_of_a_long_message_is_its_key_words() -> None:
    """The four most frequent words that are not stop words, in the order they appear."""
    title = scripted_title(PASTED)

    assert title == "Function revenue totals rows"
    assert scripted_title(PASTED) == title  # deterministic
    assert title is not None and len(title) <= TITLE_CHARS and not PASTED.startswith(title)
    assert scripted_title("the and of " * 30) is None
