"""Tests of chat.runs.titles: the model's title after a conversation's first completed run."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async

from chat import runs
from chat.agent.scripted import ScriptedChatClient, scripted_title
from chat.agent.titles import TITLE_CHARS, TITLE_INSTRUCTION
from chat.models import Conversation, title_from
from chat.runs import tasks, titles
from chat.testing import factories as make
from chat.testing.openai_script import error, text_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.testing.sockets import DONE, connect, frames_until, send

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "sk-title-test-key"
PASTED = (
    "Here is our incident report, please turn it into a summary for the team.\n\n"
    "At 09:12 the billing database stopped accepting writes. The billing workers retried, "
    "the queue grew, and the database failover took eleven minutes because the replica was "
    "behind. Billing was down for the whole time; invoices were sent late to 312 customers. "
    "The failover runbook was out of date and the database alerts went to an old channel."
)


@pytest.fixture(autouse=True)
def titles_on(settings: Any) -> None:
    settings.AGENTLAB_TITLES = "model"


@pytest.fixture
def provider(settings: Any, fake_openai: FakeOpenAIServer) -> FakeOpenAIServer:
    """The environment's endpoint is the fake server: runs started without a client use it."""
    settings.OPENAI_BASE_URL = fake_openai.base_url
    settings.OPENAI_API_KEY = KEY
    settings.AGENTLAB_MODEL = "m-1"
    return fake_openai


async def first_run(conversation: Conversation, content: str) -> runs.RunHandle:
    """The run the app starts (the client it builds), ended; its title request may go on."""
    handle = await make.start_as_owner(conversation, content)
    async with asyncio.timeout(10):
        await handle.task
    return handle


async def title_after(conversation: Conversation, content: str) -> str:
    await first_run(conversation, content)
    async with asyncio.timeout(10):
        await titles.settle()
    await conversation.arefresh_from_db()
    return conversation.title


async def test_the_model_titles_the_conversation_after_its_first_reply(
    provider: FakeOpenAIServer,
) -> None:
    provider.enqueue(text_turn("Paris in June is lovely."), text_turn('"Trip to Paris."'))
    conversation = await make.aconversation()

    assert await title_after(conversation, "plan a trip to Paris for me") == "Trip to Paris"

    run_request, title_request = (r for r in provider.requests if r.method == "POST")
    assert title_request.path == run_request.path  # the same endpoint, with the same key
    assert title_request.headers["authorization"] == f"Bearer {KEY}"
    body = title_request.body
    assert body["model"] == "m-1" and "tools" not in body
    assert body["messages"][0] == {"role": "system", "content": TITLE_INSTRUCTION}
    assert "plan a trip to Paris for me" in body["messages"][1]["content"]
    assert "Paris in June is lovely." in body["messages"][1]["content"]
    run = await conversation.runs.aget()
    assert (run.prompt_tokens, run.total_tokens) == (0, 0)  # the title's usage is not the run's


async def test_the_title_request_does_not_delay_the_run(provider: FakeOpenAIServer) -> None:
    provider.enqueue(text_turn("Hello!"), text_turn("Greetings").but(delay=1.0))
    conversation = await make.aconversation()
    started = time.monotonic()

    await first_run(conversation, "hi there")

    assert time.monotonic() - started < 0.9
    await conversation.arefresh_from_db()
    assert conversation.title == "hi there"
    async with asyncio.timeout(10):
        await titles.settle()
    await conversation.arefresh_from_db()
    assert conversation.title == "Greetings"


async def test_a_renamed_conversation_keeps_its_name(provider: FakeOpenAIServer) -> None:
    provider.enqueue(text_turn("Hello!"))
    conversation = await database_sync_to_async(
        lambda: make.conversation(make.user(), "My own name")
    )()

    assert await title_after(conversation, "hi there") == "My own name"
    assert len(provider.requests) == 1  # nothing asked


async def test_a_rename_while_the_title_is_asked_wins(provider: FakeOpenAIServer) -> None:
    provider.enqueue(text_turn("Hello!"), text_turn("Greetings").but(delay=0.5))
    conversation = await make.aconversation()
    await first_run(conversation, "hi there")

    await Conversation.objects.filter(pk=conversation.pk).aupdate(title="Renamed meanwhile")
    async with asyncio.timeout(10):
        await titles.settle()
    await conversation.arefresh_from_db()
    assert conversation.title == "Renamed meanwhile"


async def test_a_failed_run_keeps_the_first_message_title(provider: FakeOpenAIServer) -> None:
    provider.enqueue(error(400, "bad request"))
    conversation = await make.aconversation()

    assert await title_after(conversation, "hi there") == "hi there"
    assert len(provider.requests) == 1


async def test_a_provider_error_keeps_the_title_and_logs_no_prompt(
    provider: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    provider.enqueue(text_turn("Hello!"), error(401, f"Incorrect API key {KEY}: hi there"))
    conversation = await make.aconversation()

    with caplog.at_level(logging.INFO, logger="chat.runs.titles"):
        assert await title_after(conversation, "hi there") == "hi there"

    (record,) = [r for r in caplog.records if r.name == "chat.runs.titles"]
    assert record.levelno == logging.INFO and "ProviderHTTPError, HTTP 401" in record.message
    assert "hi there" not in caplog.text and KEY not in caplog.text
    # Asked once: the next completed run is not the first, so no request follows it.
    provider.enqueue(text_turn("Again."))
    assert await title_after(conversation, "and again") == "hi there"
    assert len(provider.requests) == 3


async def test_titles_off_keeps_the_first_message_title(
    provider: FakeOpenAIServer, settings: Any
) -> None:
    settings.AGENTLAB_TITLES = "off"
    provider.enqueue(text_turn("Hello!"))
    conversation = await make.aconversation()

    assert await title_after(conversation, "hi there") == "hi there"
    assert len(provider.requests) == 1


async def test_the_scripted_model_titles_a_long_pasted_prompt_by_its_key_words() -> None:
    one, two = await make.aconversation(), await make.aconversation()

    title = await title_after(one, PASTED)

    assert title == scripted_title(PASTED) == "Incident billing database failover"
    assert await title_after(two, PASTED) == title  # deterministic
    fragment = title_from(PASTED)
    assert fragment.endswith("…") and title != fragment and not title.endswith("…")
    assert len(title) <= TITLE_CHARS and not PASTED.startswith(title)
    short = await make.aconversation()
    assert await title_after(short, "what time is it?") == "what time is it?"


async def test_a_run_given_its_client_asks_no_title() -> None:
    """A caller's own client (a terminal's --base-url) may point elsewhere than the endpoint a
    title would be asked of: its runs keep the first message's title."""
    conversation = await make.aconversation()
    handle = await make.start_as_owner(conversation, PASTED, ScriptedChatClient(["Noted."]))
    await handle.task
    await titles.settle()
    await conversation.arefresh_from_db()
    assert conversation.title == title_from(PASTED)


async def test_an_open_socket_receives_the_new_title() -> None:
    conversation = await make.aconversation()
    owner = await database_sync_to_async(lambda: conversation.owner)()
    ws = await connect(owner, conversation)
    other_tab = await connect(owner, conversation)

    await send(ws, PASTED)
    await frames_until(ws, DONE)
    header = f'<h1 id="conversation-title" hx-swap-oob="true">{scripted_title(PASTED)}</h1>'
    for socket in (ws, other_tab):
        frame = (await frames_until(socket, header))[-1]
        assert f'id="conversation-link-{conversation.pk}" hx-swap-oob="true"' in frame
        await socket.disconnect()


async def test_shutdown_does_not_wait_for_a_title(provider: FakeOpenAIServer) -> None:
    provider.enqueue(text_turn("Hello!"), text_turn("Greetings").but(delay=5))
    conversation = await make.aconversation()
    await first_run(conversation, "hi there")
    assert tasks.background
    started = time.monotonic()
    try:
        assert await runs.wind_up_all(5) == 0
        async with asyncio.timeout(2):
            await titles.settle()
    finally:
        tasks.stopping.clear()
    assert time.monotonic() - started < 2
    await conversation.arefresh_from_db()
    assert conversation.title == "hi there"
