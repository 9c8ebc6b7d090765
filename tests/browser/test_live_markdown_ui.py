"""A reply's Markdown renders while it streams (chat.live_markdown): a closed code fence is a
code block and a finished table a table before the reply ends, the block being written stays
raw, and the finished reply looks the same. Screenshots mid-stream, desktop and phone, light and
dark, with axe."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from chat.models import Conversation, ProviderProfile
from chat.runs import default_parameters
from chat.testing.openai_script import MODEL, text_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPLY = (
    "Run this first:\n\n```python\nfor name in ('a', 'b'):\n    print(name)\n```\n\n"
    "| step | what |\n|---|---|\n| 1 | build |\n| 2 | deploy |\n\n"
    + "Then the last paragraph goes on for a while, word by word, "
    * 30
)


def conversation(owner: Any, fake: FakeOpenAIServer) -> Conversation:
    profile = ProviderProfile.objects.create(
        name="fake", base_url=fake.base_url, model=MODEL, available_to_everyone=True
    )
    made = Conversation.objects.create(owner=owner, profile=profile, title="Deploy steps")
    made.set_agent_parameters(default_parameters().model_copy(update={"enabled_tools": ()}))
    made.save()
    return made


def test_blocks_render_while_the_reply_streams(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer
) -> None:
    made = conversation(login(), fake_openai)
    fake_openai.enqueue(text_turn(REPLY, chunk_size=6).but(chunk_delay=0.06))
    page.goto(f"{live_server_url}/c/{made.pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)
    page.get_by_role("textbox", name="Message").fill("How do I deploy?")
    page.get_by_role("button", name="Send").click()

    streaming = page.locator(".message.assistant.streaming")
    expect(streaming.locator(".live-done table")).to_be_visible(timeout=15_000)
    expect(streaming.locator(".live-done .code-block")).to_contain_text("print(name)")
    expect(streaming.get_by_role("button", name="Copy code")).to_be_visible()
    raw = streaming.locator(".live-text")
    expect(raw).to_contain_text("Then the last paragraph")
    assert "```" not in streaming.inner_text() and "|---|" not in streaming.inner_text()

    def check(page: Page) -> None:
        expect(page.locator(".live-done table, .message.assistant table").first).to_be_visible()

    look(page, "live-markdown-streaming", check)

    finished = page.locator(".message.assistant:not(.streaming)")
    expect(finished).to_contain_text("word by word", timeout=30_000)
    expect(finished.locator("table")).to_have_count(1)
    expect(finished.locator(".code-block")).to_have_count(1)
