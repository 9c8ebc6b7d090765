"""The admin's conversation list: a long title wraps to two lines at most (its page has it
whole), a word longer than the column breaks, and every column is in view at 1440 px without a
scroll."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from chat.models import Conversation
from tests.browser.test_screens import SCREENS, VIEWPORTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LONG = (
    "A very long conversation title that goes on about the deploy, the rollback, the incident "
    "review and every follow-up the team agreed on during the retrospective meeting on Friday "
)
UNBROKEN = "x" * 120


def test_long_titles_wrap_to_two_lines_at_most(
    page: Page, live_server_url: str, login: Any
) -> None:
    owner = login()
    owner.is_staff = owner.is_superuser = True
    owner.save()
    Conversation.objects.create(owner=owner, title=LONG[:200])
    Conversation.objects.create(owner=owner, title=UNBROKEN)
    Conversation.objects.create(owner=owner, title="Short")
    page.set_viewport_size(VIEWPORTS["desktop"])
    page.goto(f"{live_server_url}/admin/chat/conversation/")
    titles = page.locator("#result_list .field-__str__ a")
    expect(titles).to_have_count(3)
    line = float(
        page.evaluate(
            "parseFloat(getComputedStyle(document.querySelector("
            "'#result_list .field-__str__ a')).lineHeight)"
        )
    )
    for index in range(3):
        box = titles.nth(index).bounding_box()
        assert box is not None and box["height"] <= 2 * line + 1, (index, box, line)
    short = titles.filter(has_text="Short").bounding_box()
    assert short is not None and short["height"] <= line + 1
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    results = "document.querySelector('#changelist .results')"
    assert page.evaluate(f"{results}.scrollWidth <= {results}.clientWidth")  # every column shown
    SCREENS.mkdir(parents=True, exist_ok=True)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
        page.screenshot(path=SCREENS / f"admin-conversations-desktop-{scheme}.png")
