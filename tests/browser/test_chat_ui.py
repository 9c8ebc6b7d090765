from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from chat.models import Conversation, Run, ToolCall
from chat.testing import factories as make
from tests.browser.conftest import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
# The slow lookup is not read-only, so it would ask first: these conversations let it run.
SLOW_RUNS = {"slow_lookup": "run"}


def open_conversation(page: Page, base: str, conversation: Conversation) -> None:
    page.goto(f"{base}/c/{conversation.pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10000)


def send(page: Page, text: str) -> None:
    page.fill("#message", text)
    page.keyboard.press("Enter")


def start_a_slow_lookup(page: Page, base: str, owner: Any, message: str) -> None:
    """Send `message` in a new conversation, and wait until the slow lookup tool runs."""
    open_conversation(page, base, make.new_conversation(owner, tool_policies=SLOW_RUNS))
    send(page, message)
    expect(page.locator(".indicator")).to_contain_text("Slow lookup", timeout=5000)


def test_reply_streams_in_progressively(page: Page, live_server_url: str, login: Any) -> None:
    conversation = make.new_conversation(login())
    open_conversation(page, live_server_url, conversation)
    send(page, "hello there, tell me something long")

    reply = page.locator(".message.assistant.streaming .live-text")
    expect(reply).to_contain_text("You said", timeout=5000)
    lengths = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        length = page.evaluate(
            "() => { const el = document.querySelector('.streaming .live-text');"
            " return el ? el.textContent.length : -1; }"
        )
        if length < 0:
            break
        lengths.append(length)
        time.sleep(0.05)
    assert len(set(lengths)) >= 3, f"text did not grow progressively: {lengths[:20]}"
    expect(page.locator(".message.assistant .reply-footer")).to_be_visible()
    expect(page.locator(".message.assistant .text")).to_contain_text("I am the scripted model")
    expect(page.locator(".message.assistant .pills")).to_have_count(0)
    expect(page.locator("#message")).to_be_enabled()
    expect(page.locator("#message")).to_have_value("")


def test_indicator_pulses_while_a_slow_tool_runs_then_pills_stay(
    page: Page, live_server_url: str, login: Any, browser: Any
) -> None:
    conversation = make.new_conversation(login(), tool_policies=SLOW_RUNS)
    open_conversation(page, live_server_url, conversation)
    second = page.context.new_page()
    open_conversation(second, live_server_url, conversation)

    send(page, "Please do a slow lookup")
    indicator = page.locator(".indicator")
    expect(indicator).to_contain_text("Looking up: Slow lookup", timeout=5000)
    expect(indicator.locator(".pulse")).to_be_visible()
    expect(page.locator("#message")).to_be_disabled()
    expect(second.locator(".indicator")).to_contain_text("Looking up: Slow lookup")

    expect(page.locator(".reply-footer")).to_be_visible(timeout=10000)
    expect(page.locator(".indicator")).to_have_count(0)
    pills = page.locator(".message.assistant .pills .pill")
    expect(pills).to_have_text(["Slow lookup"])
    expect(second.locator(".message.assistant .pills .pill")).to_have_text(["Slow lookup"])

    page.reload()
    expect(page.locator(".message.assistant .pills .pill")).to_have_text(["Slow lookup"])
    expect(page.locator(".message.assistant .text")).to_contain_text("a slow answer")
    assert ToolCall.objects.get().status == "completed"
    second.close()


def test_stop_cancels_mid_tool_and_the_next_message_works(
    page: Page, live_server_url: str, login: Any
) -> None:
    start_a_slow_lookup(page, live_server_url, login(), "do a slow lookup")
    page.click("#stop")

    expect(page.locator(".message.assistant .status-cancelled")).to_be_visible(timeout=5000)
    expect(page.locator(".message.assistant .pill-cancelled")).to_have_text(["Slow lookup"])
    assert Run.objects.get().status == "cancelled"
    expect(page.locator("#stop")).to_be_hidden()

    send(page, "hello again")
    expect(page.locator(".message.assistant .text").last).to_contain_text(
        "hello again", timeout=10000
    )
    assert wait_for(lambda: Run.objects.filter(status="completed").count() == 1)


def test_closing_the_tab_does_not_stop_the_run(
    page: Page, live_server_url: str, login: Any
) -> None:
    start_a_slow_lookup(page, live_server_url, login(), "what time is it? and a slow lookup")
    page.close()

    run = wait_for(lambda: Run.objects.exclude(status="in_progress").first(), timeout=15)
    assert run.status == "completed"
    assert run.tool_calls.count() == 2


def test_settings_validation_shows_inline_errors(
    page: Page, live_server_url: str, login: Any
) -> None:
    conversation = make.new_conversation(login())
    page.goto(f"{live_server_url}/c/{conversation.pk}/settings/")
    page.fill("#id_agent-temperature", "7")
    # A pre-message cannot answer a tool call: the role is not even offered.
    roles = page.locator("#id_pre-0-role option").all_inner_texts()
    assert roles == ["system", "user", "assistant"]
    page.fill("#id_pre-0-content", "pretend result")
    page.click("text=Save settings")
    expect(page.locator(".field-error").first).to_be_visible()
    expect(page.locator("#settings-panel")).to_contain_text("less than or equal to 2")
    conversation.refresh_from_db()
    assert conversation.agent_parameters().temperature is None

    page.fill("#id_agent-temperature", "0.3")
    page.click("text=Save settings")
    expect(page.locator(".saved")).to_be_visible()
    conversation.refresh_from_db()
    assert conversation.agent_parameters().temperature == 0.3


def test_model_output_cannot_run_scripts(page: Page, live_server_url: str, login: Any) -> None:
    conversation = make.new_conversation(login())
    open_conversation(page, live_server_url, conversation)
    page.evaluate("window.__pwned = 0")
    send(page, '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>')
    expect(page.locator(".reply-footer")).to_be_visible(timeout=10000)
    page.reload()
    expect(page.locator(".message.user .bubble")).to_contain_text("<img src=x")
    assert page.evaluate("window.__pwned || 0") == 0
    assert not re.search(r"<img src=\"?x", page.content())


def _tall_conversation(owner: Any) -> Conversation:
    from chat import agent, transcripts

    conversation = make.new_conversation(owner, tool_policies=SLOW_RUNS)
    for number in range(15):
        transcripts.append_messages(
            conversation,
            [
                agent.ChatMessage(role="user", content=f"question {number}"),
                agent.ChatMessage(role="assistant", content="An answer.\n\n" * 4),
            ],
        )
    return conversation


def _at_bottom(page: Page) -> bool:
    return bool(
        page.evaluate(
            "() => document.documentElement.scrollHeight - window.scrollY - window.innerHeight < 90"
        )
    )


def test_newest_text_stays_in_view_unless_the_reader_scrolled_up(
    page: Page, live_server_url: str, login: Any
) -> None:
    conversation = _tall_conversation(login())
    open_conversation(page, live_server_url, conversation)
    assert _at_bottom(page)
    send(page, "tell me something")
    expect(page.locator(".message.assistant .reply-footer").last).to_contain_text(
        "Scripted", timeout=10000
    )
    expect(page.locator(".message.assistant .text").last).to_contain_text("tell me something")
    assert wait_for(lambda: _at_bottom(page))

    send(page, "and once more, slowly: do a slow lookup")
    expect(page.locator(".indicator")).to_contain_text("Slow lookup", timeout=5000)
    page.evaluate("window.scrollTo(0, 0)")
    expect(page.locator(".message.assistant .pills .pill").last).to_have_text(
        "Slow lookup", timeout=10000
    )
    assert page.evaluate("window.scrollY") < 50


def test_inspect_toggle_shows_the_wire(page: Page, live_server_url: str, login: Any) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server_url)
    conversation = make.new_conversation(login())
    open_conversation(page, live_server_url, conversation)
    send(page, "what time is it?")
    reply = page.locator(".message.assistant:not(.streaming)").last
    expect(reply.locator(".run-details")).not_to_have_attribute("open", "")  # compact at first
    reply.locator(".run-details > summary").click()
    expect(reply.locator(".timeline .timeline-step")).to_have_count(2, timeout=10000)
    expect(reply.locator(".timeline")).to_contain_text("Get current time")

    reply.locator(".inspect > summary").click()
    steps = reply.locator(".inspect-step")
    expect(steps).to_have_count(2)
    expect(steps.first).to_contain_text("Step 1 of 8")
    expect(steps.first).to_contain_text("tool_calls")
    expect(steps.first.locator(".inspect-tool")).to_contain_text("Get current time")
    expect(steps.nth(1)).to_contain_text("stop")
    steps.first.locator(".raw-stream > summary").click()
    expect(steps.first.locator(".raw-stream tbody tr").first).to_contain_text("data:")
    copy = steps.first.locator("button[data-copy]").first
    copy.click()
    expect(copy).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert '"messages"' in copied and '"model": "scripted"' in copied

    page.reload()
    reply = page.locator(".message.assistant").last
    expect(reply.locator(".run-details")).to_have_attribute("open", "")  # the choice is kept
    reply.locator(".inspect > summary").click()
    expect(reply.locator(".inspect-step")).to_have_count(2)


def test_the_console_stays_clean_through_a_session(
    page: Page, live_server_url: str, login: Any
) -> None:
    """A debugging tool's own console must be quiet: no CSP violation, no script error."""
    said: list[str] = []
    page.on("console", lambda message: said.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: said.append(f"pageerror: {error}"))
    conversation = make.new_conversation(login())
    open_conversation(page, live_server_url, conversation)
    send(page, "What time is it? Also search the cards for pills")
    expect(page.locator(".message.assistant .pill")).to_have_count(2, timeout=15000)
    page.locator(".run-details > summary").first.click()
    page.get_by_text("Inspect").first.click()
    expect(page.locator(".inspector").first).to_be_visible()
    page.reload()
    page.goto(f"{live_server_url}/c/{conversation.pk}/settings/")
    page.fill("#id_agent-temperature", "1")
    page.click("text=Save settings")
    expect(page.locator(".saved")).to_be_visible()
    assert said == []


def test_a_new_user_types_the_first_message_on_the_first_screen(
    page: Page, live_server_url: str, login: Any
) -> None:
    login()
    page.goto(f"{live_server_url}/")
    expect(page.get_by_role("heading", name="Welcome to Agent Lab")).to_be_visible()
    page.get_by_label("Message").fill("What time is it?")
    page.keyboard.press("Enter")

    expect(page.locator(".message.user .bubble")).to_have_text("What time is it?")
    expect(page.locator(".message.assistant .pill")).to_have_text(
        ["Get current time"], timeout=15000
    )
    assert "/c/" in page.url
