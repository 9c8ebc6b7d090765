"""A reply resumed by another process, in the browser: the page that watched the run keeps
the saved text, faded and marked, until the resumed turn's new text replaces it; the finished
reply says "resumed", its waterfall shows the gap. The live server's own sweeper claims the
run, as after a crash. Screenshots at both sizes, light and dark, with axe."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from chat import agent, transcripts
from chat.models import Conversation, ProviderProfile, Run, RunLease
from chat.runs import default_parameters
from chat.testing.openai_script import MODEL, text_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.browser.test_screens import SCREENS, look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SAVED = "Deploys run from main once CI is green. The on-call engineer then"
AGAIN = (
    "Deploys run from main once CI is green. The on-call engineer then watches the dashboards "
    "for ten minutes and rolls back at the first alarm."
)


def crashed_mid_reply(owner: Any, fake: FakeOpenAIServer) -> Conversation:
    """A conversation whose run's process died while it streamed: the user's message and the
    reply's saved text; the run's lease runs out in a few seconds."""
    profile = ProviderProfile.objects.create(
        name="fake", base_url=fake.base_url, model=MODEL, available_to_everyone=True
    )
    made = Conversation.objects.create(owner=owner, profile=profile, title="Deploys")
    made.set_agent_parameters(default_parameters().model_copy(update={"enabled_tools": ()}))
    made.save()
    now = timezone.now()
    run = Run.objects.create(
        conversation=made,
        created_by=owner,
        worker="elsewhere:4242:gone",
        heartbeat_at=now,
        lease_expires_at=now + timedelta(seconds=3),
        parameters=made.parameters,
    )
    RunLease.objects.create(run=run, worker=run.worker, acquired_at=now - timedelta(seconds=5))
    transcripts.append_messages(
        made,
        [
            agent.ChatMessage(role="user", content="How do deploys work?"),
            agent.ChatMessage(role="assistant", content=SAVED),
        ],
        run=run,
    )
    return made


def test_a_resumed_reply_replaces_its_saved_text_and_says_resumed(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer
) -> None:
    made = crashed_mid_reply(login(), fake_openai)
    fake_openai.enqueue(text_turn(AGAIN).but(delay=2.0, chunk_delay=0.03))
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server_url}/c/{made.pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)
    expect(page.locator(".message.assistant")).to_contain_text(SAVED)

    # Claimed once the lease runs out: the saved text stays, faded, until the new text comes.
    draft = page.locator(".resumed-draft")
    expect(draft).to_have_text(SAVED, timeout=15_000)
    expect(page.locator("p.resumed-mark")).to_have_text("Resumed after a server restart")
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENS / "resumed-waiting-desktop-light.png", full_page=True)

    reply = page.locator(".message.assistant .text")
    expect(reply).to_have_text(AGAIN, timeout=15_000)
    expect(draft).to_have_count(0)
    run = Run.objects.get(conversation=made)
    assert (run.status, run.resumes) == ("completed", 1)
    assert [m["role"] for m in fake_openai.requests[0].body["messages"]] == ["user"]

    def check(page: Page) -> None:
        footer = page.locator(".message.assistant .reply-footer")
        expect(footer.locator(".resumed-mark")).to_have_text("resumed")
        expect(page.locator(".message.assistant .text")).to_have_text(AGAIN)
        details = page.locator(".run-details")
        if details.get_attribute("open") is None:
            details.locator("> summary").click()
        page.locator(".inspect > summary").click()
        expect(page.get_by_role("img", name="resumed 1 time", exact=False).first).to_be_attached()

    look(page, "resumed-reply", check)
