"""The model picker and the settings page in the browser: a model listed by a real local endpoint
is picked and the next run asks for it; system prompts are added and removed in place; "Saved"
is said by the Save button. Screenshots at 1440x900 and 390x844, light and dark, with axe.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from chat import runs
from chat.models import Conversation, ProviderProfile
from chat.testing.openai_script import MODEL, text_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

MODELS = ["fake-small", "fake-large", MODEL]
SAVED = "Saved. The next message uses these settings."


@pytest.fixture
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(models=MODELS) as server:
        yield server


def on_provider(owner: Any, server: FakeOpenAIServer, **parameters: Any) -> Conversation:
    profile = ProviderProfile.objects.create(
        name="fake", base_url=server.base_url, model=MODEL, available_to_everyone=True
    )
    made = Conversation.objects.create(owner=owner, profile=profile, title="Trip planning")
    made.set_agent_parameters(runs.default_parameters().changed(**parameters))
    made.save()
    return made


def open_picker(page: Page, label: str) -> None:
    page.get_by_role("button", name=f"Model: {label}").click()
    expect(page.locator("[data-pick-model]")).to_have_text(sorted(MODELS))
    # Focus moves once htmx has processed the panel (it settles a moment after the swap).
    expect(page.get_by_role("textbox", name="Model", exact=True)).to_be_focused()


def test_a_listed_model_is_picked_and_the_next_run_asks_for_it(
    page: Page, live_server_url: str, login: Any, fake: FakeOpenAIServer
) -> None:
    made = on_provider(login(), fake)
    fake.enqueue(text_turn("Answered by the large one."))
    page.goto(f"{live_server_url}/c/{made.pk}/")
    expect(page.locator(".model-label")).to_have_text(MODEL)

    open_picker(page, f"fake · {MODEL}")
    box = page.get_by_role("textbox", name="Model", exact=True)
    expect(box).to_be_focused()
    expect(box).to_have_attribute("placeholder", MODEL)
    expect(page.get_by_label("Provider", exact=True)).to_have_value(str(made.profile_id))
    expect(page.locator("#picker-status")).to_have_text("3 models listed by the endpoint.")

    # Escape closes and gives the focus back; opening again reads the cache.
    box.press("Escape")
    toggle = page.get_by_role("button", name=f"Model: fake · {MODEL}")
    expect(page.locator("#model-popover")).to_be_hidden()
    expect(toggle).to_be_focused()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    open_picker(page, f"fake · {MODEL}")
    expect(page.locator("#picker-status")).to_contain_text("(cached)")
    page.get_by_role("button", name="Refresh models").click()
    expect(page.locator("#picker-status")).to_have_text("3 models listed by the endpoint.")
    assert [r.method for r in fake.requests] == ["GET", "GET"]

    # Typing filters the list; a listed model fills the field.
    box.fill("lar")
    expect(page.locator("[data-pick-model]:visible")).to_have_text(["fake-large"])
    page.get_by_role("button", name="fake-large").click()
    expect(box).to_have_value("fake-large")
    expect(page.get_by_role("button", name="fake-large")).to_have_attribute("aria-pressed", "true")
    page.get_by_role("button", name="Use this model").click()

    picked = page.get_by_role("button", name="Model: fake · fake-large")
    expect(picked).to_be_focused()
    expect(page.locator("#model-popover")).to_be_hidden()
    made.refresh_from_db()
    assert made.agent_parameters().model == "fake-large"

    page.locator("#message").fill("Which model are you?")
    page.locator("#message").press("Enter")
    expect(page.get_by_text("Answered by the large one.")).to_be_visible()
    sent = [r.body for r in fake.requests if r.method == "POST"]
    assert [body["model"] for body in sent] == ["fake-large"]


def test_the_server_default_lists_the_scripted_model(
    page: Page, live_server_url: str, login: Any, fake: FakeOpenAIServer
) -> None:
    made = on_provider(login(), fake)
    page.goto(f"{live_server_url}/c/{made.pk}/")
    open_picker(page, f"fake · {MODEL}")
    page.get_by_label("Provider", exact=True).select_option(label="Server default")
    expect(page.locator("[data-pick-model]")).to_have_text(["scripted"])
    box = page.get_by_role("textbox", name="Model", exact=True)
    expect(box).to_have_attribute("placeholder", "scripted")
    expect(page.locator("#picker-status")).to_have_text(
        "The scripted model is the only model here."
    )
    page.get_by_role("button", name="Use this model").click()
    expect(page.locator(".model-label")).to_have_text("Scripted model (offline)")
    made.refresh_from_db()
    assert made.profile is None


def test_system_prompts_are_added_and_removed_in_place_then_saved(
    page: Page, live_server_url: str, login: Any
) -> None:
    made = Conversation.objects.create(owner=login(), title="Rows")
    page.goto(f"{live_server_url}/c/{made.pk}/settings/")
    expect(page.get_by_label("Temperature")).to_have_attribute("placeholder", "provider default")
    expect(page.get_by_label("Max event loops")).to_have_attribute("placeholder", "8")
    expect(page.get_by_label("Model", exact=True)).to_have_attribute("placeholder", "scripted")

    page.get_by_label("System prompt 1", exact=True).fill("Be brief.")
    page.get_by_role("button", name="Add system prompt").click()
    second = page.get_by_label("System prompt 2", exact=True)
    expect(second).to_be_focused()
    second.fill("Answer in French.")
    page.get_by_role("button", name="Remove system prompt 1").click()
    expect(page.get_by_label("System prompt 1", exact=True)).to_have_value("Answer in French.")
    expect(page.get_by_label("System prompt 2", exact=True)).to_have_count(0)
    expect(page.get_by_role("button", name="Add system prompt")).to_be_focused()

    save = page.get_by_role("button", name="Save settings")
    save.click()
    status = page.get_by_role("status").filter(has_text=SAVED)
    expect(status).to_be_visible()
    made.refresh_from_db()
    assert made.agent_parameters().system_prompts == ("Answer in French.",)
    # Said where the user is looking: on the Save button's line.
    button, said = save.bounding_box(), status.bounding_box()
    assert button is not None and said is not None
    assert abs((button["y"] + button["height"] / 2) - (said["y"] + said["height"] / 2)) < 12
    assert said["x"] > button["x"] + button["width"]

    page.get_by_label("Temperature").fill("0.4")
    expect(page.locator("#settings-status")).to_have_text("")


def test_screens_of_the_picker_and_the_settings_page(
    page: Page, live_server_url: str, login: Any, fake: FakeOpenAIServer
) -> None:
    made = on_provider(
        login(),
        fake,
        system_prompts=["You plan trips. Be brief."],
        pre_messages=[{"role": "assistant", "content": "Where to?"}],
        temperature=0.4,
    )
    fake.enqueue(text_turn("Lisbon in May: mild, bright, and not yet crowded."))
    page.goto(f"{live_server_url}/c/{made.pk}/")
    page.locator("#message").fill("Where should I go in May?")
    page.locator("#message").press("Enter")
    expect(page.get_by_text("Lisbon in May")).to_be_visible()

    def picker_open(page: Page) -> None:
        open_picker(page, f"fake · {MODEL}")
        page.get_by_role("button", name="fake-large").click()

    look(page, "model-picker", picker_open)

    page.goto(f"{live_server_url}/c/{made.pk}/settings/")

    def settings_saved(page: Page) -> None:
        page.get_by_role("button", name="Save settings").click()
        expect(page.locator("#settings-status")).to_have_text(SAVED)
        page.evaluate("window.scrollTo(0, 0)")  # the sticky top bar where it belongs

    look(page, "settings", settings_saved)
    assert re.search(r"fake", page.get_by_label("Provider", exact=True).inner_text())
