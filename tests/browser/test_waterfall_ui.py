"""A run's waterfall in the browser: two slow lookups at once on a strict fake provider overlap in
time on separate lanes, in the inspector and in the admin transcript; the failed calls' pills say
why. Screenshots at 1440x900 and 390x844, light and dark, with axe."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from chat.models import Conversation, ProviderProfile, ToolCall
from chat.testing.openai_script import MODEL, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.browser.test_screens import SCREENS, look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPLY = "Both lookups came back; one tool does not exist and one call was garbled."


def on_provider(owner: Any, fake: FakeOpenAIServer) -> Conversation:
    profile = ProviderProfile.objects.create(
        name="fake", base_url=fake.base_url, model=MODEL, available_to_everyone=True
    )
    made = Conversation.objects.create(owner=owner, profile=profile, title="Two slow lookups")
    # The slow lookup is not read-only: it runs without asking here (approvals are not tested).
    made.parameters = {"enabled_tools": ["slow_lookup"], "tool_policies": {"slow_lookup": "run"}}
    made.save()
    return made


def open_inspector(page: Page) -> None:
    details = page.locator(".run-details")
    if details.get_attribute("open") is None:
        details.locator("> summary").click()
    inspect = page.locator(".inspect")
    if inspect.get_attribute("open") is None:
        inspect.locator("> summary").click()
    expect(page.locator(".inspector svg.waterfall:visible")).to_be_visible(timeout=10_000)


def close_up(page: Page, picture: Locator, name: str) -> None:
    """The picture alone, at this viewport and colour scheme (the page's screenshot has it among
    everything else, and a sticky composer may sit on it)."""
    viewport = "phone" if (page.viewport_size or {"width": 0})["width"] < 700 else "desktop"
    dark = page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
    picture.screenshot(path=SCREENS / f"{name}-{viewport}-{'dark' if dark else 'light'}.png")


def test_parallel_calls_overlap_in_the_waterfall_and_failed_pills_say_why(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer
) -> None:
    owner = login()
    made = on_provider(owner, fake_openai)
    fake_openai.enqueue(
        tool_turn(
            [
                ("c1", "slow_lookup", "{}"),
                ("c2", "slow_lookup", '{"again": true}'),
                ("c3", "launch_rockets", "{}"),
                ("c4", "slow_lookup", "{oops"),
            ],
            text="Looking twice at once.",  # a first token: tool calls alone set none
            usage=(412, 38),
        ),
        text_turn(REPLY, usage=(530, 21)),
    )
    page.goto(f"{live_server_url}/c/{made.pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)
    page.locator("#message").fill("Look it up twice, at once")
    page.locator("#message").press("Enter")
    expect(page.locator(".message.assistant .text")).to_contain_text(REPLY, timeout=15_000)
    failures = dict(ToolCall.objects.values_list("call_id", "failure"))
    assert failures == {"c1": "", "c2": "", "c3": "unknown_tool", "c4": "invalid_arguments"}

    def check(page: Page) -> None:
        pills = page.locator(".message.assistant .pills")
        expect(pills.get_by_role("button", name="Launch rockets · unknown tool")).to_be_visible()
        expect(pills.get_by_role("button", name="Slow lookup · invalid arguments")).to_be_visible()
        expect(pills.get_by_role("button", name="Slow lookup", exact=True)).to_have_count(2)
        open_inspector(page)
        picture = page.locator(".inspector svg.waterfall:visible")
        expect(picture).to_have_attribute("role", "img")
        phone = (page.viewport_size or {"width": 0})["width"] < 700
        expect(picture).to_have_class(re.compile("waterfall-narrow" if phone else "waterfall-wide"))
        summary = r"^Run of \d+\.\d\d s: 2 model calls, 4 tool calls \(2 failed\)$"
        expect(picture).to_have_attribute("aria-label", re.compile(summary))
        done = picture.locator("rect.wf-tool.wf-completed")
        expect(done).to_have_count(2)
        first, second = (done.nth(n).bounding_box() for n in range(2))
        assert first is not None and second is not None
        assert first["y"] != second["y"]  # separate lanes
        overlap = min(first["x"] + first["width"], second["x"] + second["width"]) - max(
            first["x"], second["x"]
        )
        assert overlap > 0.8 * min(first["width"], second["width"])  # at the same time
        expect(picture.locator("rect.wf-tool.wf-failed")).to_have_count(2)
        expect(picture.locator("line.wf-first-token")).to_have_count(2)
        close_up(page, picture, "waterfall-inspector")
        legend = page.locator(".inspector .waterfall-legend")
        expect(legend.locator("li")).to_have_text(
            ["Model call", "First token", "Tool call", "Failed"]
        )
        close_up(page, page.locator(".inspector .waterfall-frame"), "waterfall-legend-inspector")
        offered = page.locator(".inspect-offered").first
        expect(offered).to_contain_text("Offered: slow_lookup called")
        expect(offered).to_contain_text("called but not offered: launch_rockets")

    look(page, "waterfall", check)

    owner.is_staff = owner.is_superuser = True
    owner.save()
    page.goto(f"{live_server_url}/admin/chat/conversation/{made.pk}/change/")

    def admin(page: Page) -> None:
        picture = page.locator(f"#run-{made.runs.get().pk} svg.waterfall:visible")
        expect(picture).to_be_visible()
        expect(picture.locator("rect.wf-tool")).to_have_count(4)
        close_up(page, picture, "waterfall-admin-run")
        frame = page.locator(f"#run-{made.runs.get().pk} .waterfall-frame")
        expect(frame.locator(".waterfall-legend li")).to_have_text(
            ["Model call", "First token", "Tool call", "Failed"]
        )
        close_up(page, frame, "waterfall-legend-admin")
        rockets = page.locator("a.pill-unknown_tool")  # the call, and the reply answering it
        expect(rockets).to_have_text(["Launch rockets · unknown tool"] * 2)

    look(page, "waterfall-admin", admin)
