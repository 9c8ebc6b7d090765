"""What an MCP tool returned to show, in the browser: a chart from structured content, a sound,
an embedded runbook and a download, in the call's details. Real MCP server, strict fake
provider; screenshots at both sizes, light and dark, with axe."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from chat.testing.openai_script import text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.browser.test_mcp_ui import docs_http, docs_server, on_provider
from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["docs_http"]  # the module's MCP server fixture

REPLY = "The week's load peaked on Tuesday; the runbook and the export are attached."


def test_a_calls_details_show_its_images_sound_resources_and_downloads(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer, docs_http: Any
) -> None:
    docs_server(docs_http.url)
    calls = [
        ("c1", "docs__chart", '{"padding": 300000}'),
        ("c2", "docs__tone", "{}"),
        ("c3", "docs__runbook", "{}"),
        ("c4", "docs__archive", "{}"),
    ]
    made = on_provider(login(), fake_openai, "docs__*", allow=[name for _, name, _ in calls])
    fake_openai.enqueue(tool_turn(calls), text_turn(REPLY))
    page.goto(f"{live_server_url}/c/{made.pk}/")
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10_000)
    page.locator("#message").fill("How was the week?")
    page.locator("#message").press("Enter")
    expect(page.locator(".message.assistant .text")).to_contain_text(REPLY, timeout=15_000)
    told = fake_openai.requests[1].body["messages"]
    assert all("iVBORw0KGgo" not in str(m.get("content")) for m in told)

    def chart(page: Page) -> None:
        page.get_by_role("button", name="Chart", exact=True).click()
        image = page.get_by_role("img", name="Image 1 from Chart (image/png)")
        expect(image).to_be_visible()
        # The real PNG, decoded by the browser (a slow machine may still be decoding it).
        page.wait_for_function(
            "img => img.complete && img.naturalWidth === 48", arg=image.element_handle()
        )
        expect(page.locator(".tool-detail")).to_contain_text("characters of base64)")

    look(page, "mcp-media-chart", chart)

    def sound_and_runbook(page: Page) -> None:
        page.get_by_role("button", name="Tone", exact=True).click()
        expect(page.get_by_label("Sound 1 from Tone (audio/wav)")).to_be_visible()
        page.get_by_role("button", name="Runbook", exact=True).click()
        detail = page.locator(".tool-detail")
        expect(detail).to_contain_text("docs://runbooks/deploy.md")
        expect(detail.get_by_label("Resource docs://runbooks/deploy.md")).to_contain_text(
            "Run `make deploy`."
        )

    look(page, "mcp-media-runbook", sound_and_runbook)

    page.get_by_role("button", name="Archive", exact=True).click()
    link = page.get_by_role("link", name="Download export.zip")
    with page.expect_download() as download:
        link.click()
    assert download.value.suggested_filename == "export.zip"
    with open(download.value.path(), "rb") as file:
        assert file.read(4) == b"PK\x05\x06"
