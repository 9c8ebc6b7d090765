from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from chat import runs
from chat.models import Conversation, ToolCall
from tests.browser.conftest import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Long enough that the scripted model (20 ms a word in the test server) streams it for about a
# second: the fork's page is open before the continuation ends.
EDITED = "EDITED-RESULT " + " ".join(f"word{number}" for number in range(40))


def finished_conversation_with_a_tool_call(page: Page, base: str, owner: Any) -> Conversation:
    conversation = Conversation(owner=owner)
    conversation.set_agent_parameters(runs.default_parameters())
    conversation.save()
    page.goto(f"{base}/c/{conversation.pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10000)
    page.fill("#message", "what time is it?")
    page.keyboard.press("Enter")
    expect(page.locator(".message.assistant .reply-footer")).to_be_visible(timeout=10000)
    expect(page.locator(".message.assistant .text")).to_contain_text("Here is what the tools said")
    return conversation


def open_tool_fork_page(page: Page, base: str, conversation: Conversation) -> None:
    log = wait_for(
        lambda: ToolCall.objects.filter(
            run__conversation=conversation, name="get_current_time"
        ).first()
    )
    link = page.locator(f'a[href$="/fork/tool/{log.pk}/"]')
    if link.count():
        link.first.click()
    else:
        page.goto(f"{base}/c/{conversation.pk}/fork/tool/{log.pk}/")


def test_edit_a_tool_result_fork_and_watch_the_continuation(
    page: Page, live_server_url: str, login: Any
) -> None:
    parent = finished_conversation_with_a_tool_call(page, live_server_url, login())
    original = parent.messages.get(role="tool").content

    open_tool_fork_page(page, live_server_url, parent)
    expect(page.locator("#fork-tool")).to_have_text("Get current time")
    expect(page.locator("#id_result")).to_have_value(original)
    page.fill("#id_result", EDITED)
    page.get_by_role("button", name="Fork and continue").click()

    fork = wait_for(lambda: Conversation.objects.filter(parent=parent).first())
    expect(page).to_have_url(re.compile(rf"/c/{fork.pk}/$"))
    live = page.locator(".message.assistant.streaming .live-text")
    expect(live).to_contain_text("EDITED-RESULT", timeout=5000)
    expect(page.locator(".message.assistant.streaming")).to_have_count(0, timeout=10000)
    reply = page.locator(".message.assistant .text").last
    expect(reply).to_contain_text(f"Get current time: {EDITED}")
    expect(page.locator(".message.assistant .pills .pill")).to_have_text(["Get current time"])
    expect(page.locator("#message")).to_be_enabled()

    page.reload()
    expect(page.locator(".message.assistant .text").last).to_contain_text(
        f"Get current time: {EDITED}"
    )
    expect(page.locator(".message.assistant .pills .pill")).to_have_text(["Get current time"])

    assert parent.messages.get(role="tool").content == original
    assert parent.messages.count() == 4
    page.goto(f"{live_server_url}/c/{parent.pk}/")
    expect(page.locator(".message.assistant .text")).not_to_contain_text("EDITED-RESULT")


def test_fork_after_a_message_opens_the_fork(page: Page, live_server_url: str, login: Any) -> None:
    parent = finished_conversation_with_a_tool_call(page, live_server_url, login())

    page.goto(f"{live_server_url}/c/{parent.pk}/fork/message/0/")
    expect(page.locator("#fork-preview")).to_have_text("what time is it?")
    page.get_by_role("button", name="Fork", exact=True).click()

    fork = wait_for(lambda: Conversation.objects.filter(parent=parent).first())
    expect(page).to_have_url(re.compile(rf"/c/{fork.pk}/$"))
    expect(page.locator(".message.user .bubble")).to_have_text("what time is it?")
    expect(page.locator("#conversation-title")).to_have_text("what time is it? (fork)")
