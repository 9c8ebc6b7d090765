"""Attached files in the browser: the Attach button, a drop and a paste make chips (each
uploaded at once), a refused file says why and loses nothing else, Send carries the files to the
scripted model, and the transcript shows them after the reply and after a reload; the first
screen sends files with its form; a model known to take no images holds Send."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from playwright.sync_api import FilePayload, Page, expect

from chat.models import Conversation, ProviderProfile
from chat.testing import factories as make
from chat.testing.agents import default_agent_on
from chat.testing.approvals import on_provider
from chat.testing.openai_server import FakeOpenAIServer
from tests.attachments import files as made_files
from tests.browser.test_screens import SCREENS, look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NOTES = b"region,total\nnorth,12\nsouth,7\n"
# Builds Files in the page and hands them over as a drop on the composer or a paste in the box.
HAND_OVER = """([how, files]) => {
  const data = new DataTransfer();
  for (const [name, type, b64] of files) {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    data.items.add(new File([bytes], name, { type }));
  }
  const options = { bubbles: true, cancelable: true };
  if (how === "paste") {
    const box = document.getElementById("message");
    box.dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, ...options }));
    return;
  }
  const form = document.getElementById("composer");
  for (const type of ["dragenter", "dragover"]) {
    form.dispatchEvent(new DragEvent(type, { dataTransfer: data, ...options }));
  }
  window.dropShown = form.classList.contains("dropping");
  if (how === "drag") return;
  form.dispatchEvent(new DragEvent("drop", { dataTransfer: data, ...options }));
}"""


def hand_over(page: Page, how: str, *files: tuple[str, str, bytes]) -> None:
    encoded = [[name, kind, base64.b64encode(data).decode()] for name, kind, data in files]
    page.evaluate(HAND_OVER, [how, encoded])


def open_conversation(page: Page, base: str, conversation: Conversation) -> None:
    page.goto(f"{base}/c/{conversation.pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10000)


def attach_by_button(page: Page, *files: tuple[str, str, bytes]) -> None:
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach files").click()
    chooser.value.set_files(payloads(*files))


def payloads(*files: tuple[str, str, bytes]) -> list[FilePayload]:
    return [{"name": name, "mimeType": kind, "buffer": data} for name, kind, data in files]


def chip(page: Page, name: str) -> Any:
    return page.locator("#attach-chips .attach-chip", has_text=name)


def ready(page: Page, *names: str) -> None:
    for name in names:
        expect(chip(page, name)).to_have_attribute("data-state", "ready", timeout=10000)


def test_attach_by_button_drop_and_paste_then_send_and_see_the_files_after_a_reload(
    page: Page, live_server_url: str, login: Any
) -> None:
    conversation = make.new_conversation(login())
    open_conversation(page, live_server_url, conversation)
    other_tab = page.context.new_page()
    open_conversation(other_tab, live_server_url, conversation)
    page.fill("#message", "What do you see?")

    attach_by_button(page, ("chart.png", "image/png", made_files.png(120, 80)))
    hand_over(page, "drop", ("notes.csv", "text/csv", NOTES))
    assert page.evaluate("window.dropShown") is True  # the composer showed where files go
    expect(page.locator("#composer")).not_to_have_class("dropping")
    hand_over(page, "paste", ("image.png", "image/png", made_files.png(30, 30, (200, 40, 40))))
    ready(page, "chart.png", "notes.csv", "Pasted image 1.png")

    image = chip(page, "chart.png")
    expect(image.locator("img.chip-thumb")).to_be_visible()
    expect(image.locator(".chip-facts")).to_have_text(f"{len(made_files.png(120, 80))} bytes")
    expect(chip(page, "notes.csv").locator(".chip-facts")).to_have_text(f"{len(NOTES)} bytes")
    page.get_by_role("button", name="Remove Pasted image 1.png").click()
    expect(page.locator("#attach-chips .attach-chip")).to_have_count(2)

    hand_over(page, "drop", ("fake.png", "image/png", b"not an image at all"))
    expect(page.locator("#notice")).to_contain_text("fake.png")
    expect(chip(page, "fake.png")).to_have_count(0)
    expect(page.locator("#attach-chips .attach-chip")).to_have_count(2)
    expect(page.locator("#message")).to_have_value("What do you see?")

    page.locator("#message").press("Enter")
    sent = page.locator(".message.user").last
    expect(page.locator(".message.assistant .text")).to_contain_text("You attached", timeout=10000)
    expect(page.locator("#attach-chips .attach-chip")).to_have_count(0)
    expect(page.locator("#attach-chips")).to_be_hidden()
    expect(page.locator("#message")).to_have_value("")

    def shows_the_files(where: Any) -> None:
        thumbnail = where.get_by_role("img", name="chart.png")
        expect(thumbnail).to_be_visible()
        thumbnail.evaluate("(img) => img.decode()")
        assert thumbnail.evaluate("(img) => img.naturalWidth") == 120
        expect(where.locator(".attached-file")).to_contain_text("notes.csv")
        expect(where.locator(".bubble")).to_have_text("What do you see?")

    shows_the_files(sent)
    shows_the_files(other_tab.locator(".message.user").last)  # appended live
    page.reload()
    shows_the_files(page.locator(".message.user").last)
    link = page.locator(".attached-image").first
    expect(link).to_have_attribute("target", "_blank")
    href = page.locator(".attached-file").get_attribute("href")
    download = page.request.get(f"{live_server_url}{href}")
    assert download.body() == NOTES and "attachment" in download.headers["content-disposition"]


def test_files_alone_are_a_message_and_the_eleventh_file_waits(
    page: Page, live_server_url: str, login: Any
) -> None:
    conversation = make.new_conversation(login())
    open_conversation(page, live_server_url, conversation)
    notes = [(f"note-{n}.txt", "text/plain", f"note {n}\n".encode()) for n in range(11)]

    attach_by_button(page, *notes)

    expect(page.locator("#notice")).to_contain_text(
        "A message carries at most 10 files: note-10.txt was not attached."
    )
    expect(page.locator("#attach-chips .attach-chip")).to_have_count(10)
    ready(page, *(name for name, _, _ in notes[:10]))
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".message.assistant .text")).to_contain_text("You attached", timeout=10000)
    message = page.locator(".message.user").last
    expect(message.locator(".attached-file")).to_have_count(10)
    expect(message.locator(".bubble")).to_have_count(0)


def test_a_model_that_takes_no_images_holds_send_until_they_are_removed(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer
) -> None:
    conversation = on_provider(fake_openai, login())
    ProviderProfile.objects.filter(name="fake").update(accepts_images=False)
    open_conversation(page, live_server_url, conversation)

    attach_by_button(
        page,
        ("chart.png", "image/png", made_files.png()),
        ("notes.csv", "text/csv", NOTES),
    )
    ready(page, "chart.png", "notes.csv")

    warning = page.locator("#attach-warning")
    expect(warning).to_contain_text("takes no images (check_provider found so): remove chart.png")
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    page.get_by_role("button", name="Remove chart.png").click()
    expect(warning).to_be_hidden()
    expect(page.get_by_role("button", name="Send")).to_be_enabled()

    def warned(page: Page) -> None:
        page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10000)
        hand_over(page, "paste", ("image.png", "image/png", made_files.png(40, 40)))
        ready(page, "Pasted image 1.png")
        expect(warning).to_be_visible()
        expect(page.get_by_role("button", name="Send")).to_be_disabled()

    look(page, "attachments-no-images", warned)


def test_the_first_screen_holds_images_for_a_default_agent_that_takes_none(
    page: Page, live_server_url: str, login: Any
) -> None:
    blind = ProviderProfile.objects.create(
        name="blind", base_url="http://127.0.0.1:9/v1", model="text-only", accepts_images=False
    )
    default_agent_on(login(), blind)
    page.goto(live_server_url + "/")
    expect(page.get_by_role("heading", name="Welcome to Agent Lab")).to_be_visible()
    page.locator("#message").fill("What is in it?")
    page.set_input_files("#attach-input", payloads(("chart.png", "image/png", made_files.png())))

    warning = page.locator("#attach-warning")
    expect(warning).to_contain_text("The model text-only takes no images")
    expect(warning).to_contain_text("remove chart.png")
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    page.get_by_role("button", name="Remove chart.png").click()
    expect(warning).to_be_hidden()
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    expect(page.locator("#message")).to_have_value("What is in it?")


def test_the_first_screen_sends_its_files_with_the_form(
    page: Page, live_server_url: str, login: Any
) -> None:
    login()
    page.goto(live_server_url + "/")
    expect(page.get_by_role("heading", name="Welcome to Agent Lab")).to_be_visible()

    def with_files(page: Page) -> None:
        page.set_input_files(
            "#attach-input",
            payloads(
                ("chart.png", "image/png", made_files.png(64, 48)),
                ("spec.pdf", "application/pdf", made_files.pdf("Hi")),
                ("extra.txt", "text/plain", b"extra\n"),
            ),
        )
        expect(page.locator("#attach-chips .attach-chip")).to_have_count(3)
        hand_over(page, "drag", ("more.txt", "text/plain", b"more\n"))
        expect(page.locator("#composer")).to_have_class(re.compile("dropping"))

    look(page, "attachments-first-screen", with_files)
    hand_over(page, "drop", ("more.txt", "text/plain", b"more\n"))
    expect(page.locator("#attach-chips .attach-chip")).to_have_count(4)
    page.screenshot(path=SCREENS / "attachments-first-screen-chips-phone-dark.png")
    page.get_by_role("button", name="Remove more.txt").click()
    page.get_by_role("button", name="Remove extra.txt").click()
    assert page.evaluate("document.getElementById('attach-input').files.length") == 2
    page.get_by_role("button", name="Send").click()

    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10000)
    expect(page.locator(".message.assistant .text")).to_contain_text("You attached", timeout=10000)
    message = page.locator(".message.user").first
    expect(message.get_by_role("img", name="chart.png")).to_be_visible()
    expect(message.locator(".attached-file")).to_contain_text("PDF · 1 page")
    expect(message.locator(".attached-file")).not_to_contain_text("extra.txt")


def test_attachments_look_right_on_every_screen(
    page: Page, live_server_url: str, login: Any
) -> None:
    conversation = make.new_conversation(login(), title="A chart and its notes")
    open_conversation(page, live_server_url, conversation)
    attach_by_button(
        page,
        ("chart.png", "image/png", made_files.png(480, 320)),
        ("quarterly-figures-north-and-south.csv", "text/csv", NOTES),
        ("spec.pdf", "application/pdf", made_files.pdf("one", "two", "three")),
    )
    ready(page, "chart.png", "spec.pdf")
    page.fill("#message", "What do these say?")
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".message.assistant .text")).to_contain_text("You attached", timeout=10000)

    def composer_with_chips(page: Page) -> None:
        page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10000)
        expect(page.get_by_role("img", name="chart.png")).to_be_visible()
        page.fill("#message", "And this one?")
        attach_by_button(
            page,
            ("photo.png", "image/png", made_files.png(300, 300, (240, 180, 40))),
            ("a-rather-long-file-name-for-a-phone-screen.md", "text/markdown", b"# Notes\n"),
        )
        ready(page, "photo.png", "a-rather-long-file-name-for-a-phone-screen.md")

    look(page, "attachments", composer_with_chips)


def test_an_edit_keeps_the_files_and_the_admin_transcript_shows_them(
    page: Page, live_server_url: str, login: Any
) -> None:
    owner = login()
    owner.is_staff = owner.is_superuser = True
    owner.save()
    conversation = make.new_conversation(owner, title="Files for the admin")
    open_conversation(page, live_server_url, conversation)
    attach_by_button(
        page,
        ("chart.png", "image/png", made_files.png(200, 120)),
        ("spec.pdf", "application/pdf", made_files.pdf("one", "two")),
    )
    ready(page, "chart.png", "spec.pdf")
    page.fill("#message", "Read these")
    page.locator("#message").press("Enter")
    expect(page.locator(".message.assistant .text")).to_contain_text("You attached", timeout=10000)

    page.get_by_role("button", name="Edit message").click()
    expect(page.locator(".edit-files")).to_have_text("The attached files stay with the message.")
    editing = page.get_by_role("textbox", name="Edit message 0")
    editing.fill("Read these again")
    editing.press("Enter")
    expect(page.locator(".version-count").first).to_contain_text("2 / 2", timeout=10000)
    expect(page.locator(".message.assistant .text")).to_contain_text("said: “Read these again”")
    message = page.locator(".message.user").first
    expect(message.get_by_role("img", name="chart.png")).to_be_visible()
    expect(message.locator(".attached-file")).to_contain_text("PDF · 2 pages")

    def transcript(page: Page) -> None:
        images = page.locator("#transcript .attached-image img")
        expect(images.first).to_be_visible()
        images.first.scroll_into_view_if_needed()  # lazy: loaded once in view
        images.first.evaluate("(img) => img.decode()")
        assert images.first.evaluate("(img) => img.naturalWidth") == 200
        expect(page.locator("#transcript .attached-file").first).to_contain_text("spec.pdf")

    page.goto(f"{live_server_url}/admin/chat/conversation/{conversation.pk}/change/")
    look(page, "attachments-admin", transcript)
