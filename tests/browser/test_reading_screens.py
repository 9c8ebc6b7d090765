"""The reading and finding screens as users see them, at 1440 and 390 px, light and dark, each
checked with axe (no serious or critical violation) and saved under var/screenshots/."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from chat import agent, runs, transcripts
from chat.models import Conversation, Run, ToolCall
from tests.browser.test_screens import PASSWORD, look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPLY = """Here is the fix, with the **one** change marked:

```python
def total(items: list[int]) -> int:
    # Sum only the positive items.
    return sum(item for item in items if item > 0)
```

| input | before | after |
|---|---|---|
| `[1, -2, 3]` | 2 | 4 |
| `[]` | 0 | 0 |
"""


def reading_conversation(owner: Any) -> Conversation:
    """A finished turn with a tool call, highlighted code and a table."""
    made = Conversation.objects.create(owner=owner, title="Fix the total")
    made.set_agent_parameters(runs.default_parameters())
    made.save()
    run = Run.objects.create(
        conversation=made, status="completed", model="scripted", duration=1.42,
        prompt_tokens=412, completion_tokens=96, total_tokens=508,
    )  # fmt: skip
    call = agent.ToolCall(id="c1", name="search_cards", arguments='{"query": "total"}')
    rows = transcripts.append_messages(
        made,
        [
            agent.ChatMessage(role="user", content="Why is total() wrong for negative items?"),
            agent.ChatMessage(role="assistant", content=None, tool_calls=(call,)),
            agent.ChatMessage(role="tool", tool_call_id="c1", content='{"cards": ["sum"]}'),
            agent.ChatMessage(role="assistant", content=REPLY),
        ],
        run=run,
    )
    ToolCall.objects.create(
        run=run, message=rows[1], step=1, call_id="c1", name="search_cards",
        arguments='{"query": "total"}', status="completed", result='{"cards": ["sum"]}',
        duration=0.21,
    )  # fmt: skip
    return made


def test_a_reply_with_code_a_table_and_a_tool_opened(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = reading_conversation(login())
    page.goto(f"{live_server_url}/c/{made.pk}/")

    def check(page: Page) -> None:
        expect(page.locator(".code-lang")).to_have_text("Python")
        pill = page.get_by_role("button", name="Search cards", exact=True)
        pill.focus()
        page.keyboard.press("Enter")  # a pill opens from the keyboard
        expect(page.locator(".tool-detail")).to_contain_text('"query": "total"')
        expect(pill).to_have_attribute("aria-expanded", "true")

    look(page, "reading", check)

    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server_url)
    copy = page.locator(".copy-code")  # its name becomes "Copied" for a moment
    expect(copy).to_have_accessible_name("Copy code")
    copy.click()
    expect(copy).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("def total(items: list[int]) -> int:\n")


def test_the_details_and_the_inspector(page: Page, live_server_url: str, login: Any) -> None:
    made = reading_conversation(login())
    page.goto(f"{live_server_url}/c/{made.pk}/")
    page.locator(".run-details > summary").click()

    def check(page: Page) -> None:
        page.locator(".inspect > summary").click()
        expect(page.locator(".inspector")).to_be_visible()

    look(page, "inspector", check)


def test_the_phone_drawer_and_the_shortcuts(page: Page, live_server_url: str, login: Any) -> None:
    made = reading_conversation(login())
    page.goto(f"{live_server_url}/c/{made.pk}/")

    def drawer(page: Page) -> None:
        toggle = page.get_by_role("button", name="Conversations")
        if toggle.is_visible():
            toggle.click()
            expect(page.get_by_role("link", name="Fix the total")).to_be_visible()
            slid_in = "getComputedStyle(document.getElementById('sidebar')).transform"
            for _ in range(50):
                if page.evaluate(slid_in) == "none":
                    break
                page.wait_for_timeout(20)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= page.viewport_size["width"]  # type: ignore[index]  # nothing overflows

    look(page, "drawer", drawer)

    def shortcuts(page: Page) -> None:
        page.locator("#conversation-title").click()
        page.keyboard.press("?")
        expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_visible()

    look(page, "shortcuts", shortcuts)


def test_the_login_and_the_admin_transcript(page: Page, live_server_url: str) -> None:
    page.goto(f"{live_server_url}/login/")

    def login_page(page: Page) -> None:
        expect(page.get_by_role("button", name="Log in")).to_be_visible()

    look(page, "login", login_page)

    root = get_user_model().objects.create_superuser("root", password=PASSWORD)
    made = reading_conversation(root)
    page.get_by_label("Username").fill("root")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.goto(f"{live_server_url}/admin/chat/conversation/{made.pk}/change/")

    def transcript(page: Page) -> None:
        expect(page.locator(".chat-markdown .code-lang")).to_have_text("Python")

    look(page, "admin-transcript", transcript)
