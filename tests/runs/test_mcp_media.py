"""An MCP result's images, sounds and resources: the model reads a line about each, the run's
log keeps them whole, and the call's details show them to whoever may read the conversation.
Real server (the SDK's, over streamable HTTP), strict provider, the page's own views."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import AsyncClient
from django.urls import reverse

from chat.models import Conversation, ToolCall
from chat.runs import mcp as hub_module
from chat.testing import factories as make
from chat.testing.mcp_server import RUNBOOK, RUNBOOK_URI, McpHttpServer, png
from chat.testing.openai_script import text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer

from .test_mcp import conversation, http_server, run, tool_message

pytestmark = pytest.mark.django_db(transaction=True)

CALLS = [
    ("c1", "docs__chart", '{"padding": 300000}'),
    ("c2", "docs__tone", "{}"),
    ("c3", "docs__runbook", "{}"),
    ("c4", "docs__archive", "{}"),
    ("c5", "docs__oncall_link", "{}"),
    ("c6", "docs__gradient", "{}"),
]


async def media_run(fake: FakeOpenAIServer, docs: McpHttpServer) -> tuple[Conversation, Any]:
    await hub_module.hub.refresh(await http_server(docs.url))
    made = await conversation("docs__*", allow=[name for _, name, _ in CALLS])
    fake.enqueue(tool_turn(CALLS), text_turn("Here is the week."))
    finished = await run(made, fake, "Show me the week")
    assert finished.status == "completed"
    calls = {
        c.call_id: c async for c in ToolCall.objects.filter(run=finished).select_related("run")
    }
    return made, calls


async def client_of(user: Any) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


def media_url(call: ToolCall, number: int) -> str:
    return reverse("chat:tool_call_media", args=[call.run.conversation_id, call.pk, number])


async def test_the_model_reads_a_line_for_each_medium_and_the_log_keeps_them_whole(
    docs_http: McpHttpServer, hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    _, calls = await media_run(fake_openai, docs_http)
    chart = tool_message(fake_openai, 1, "c1")
    size = f"{len(png(padding=300_000)):,}"
    assert chart == (
        "The load chart for this week.\n"
        '{"title": "Weekly load", "points": [3, 5, 4], '
        f'"image": "[image: image/png, {size} bytes, shown to the user]"}}'
    )
    body = json.dumps(fake_openai.requests[1].body)
    assert "iVBORw0KGgo" not in body and len(body) < 20_000  # no base64 reached the provider
    assert tool_message(fake_openai, 1, "c2").startswith("[audio: audio/wav, ")
    assert tool_message(fake_openai, 1, "c3") == (
        f"Here is the runbook.\n[resource {RUNBOOK_URI} (text/markdown)]\n{RUNBOOK}"
    )
    assert tool_message(fake_openai, 1, "c4") == (
        "[resource docs://export.zip: application/zip, 1,024 bytes, shown to the user]"
    )
    assert tool_message(fake_openai, 1, "c5") == (
        "[resource link on-call docs://oncall.md (text/markdown)]"
    )
    stored = calls["c1"].raw_result["structuredContent"]["image"]["data"]
    assert base64.b64decode(stored) == png(padding=300_000)  # kept whole
    assert calls["c1"].result == chart


async def test_the_details_show_the_media_and_the_media_view_serves_them(
    docs_http: McpHttpServer, hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    made, calls = await media_run(fake_openai, docs_http)
    owner = await database_sync_to_async(lambda: made.owner)()
    client = await client_of(owner)

    chart = calls["c1"]
    detail = reverse("chat:tool_call_detail", args=[made.pk, chart.pk])
    page = (await client.get(detail)).content.decode()
    assert f'<img src="{media_url(chart, 1)}" alt="Image 1 from Chart (image/png)"' in page
    assert len(page) < 30_000  # the raw result shows its base64 shortened
    assert "characters of base64)" in page

    picture = await client.get(media_url(chart, 1))
    assert picture.status_code == 200 and picture.content == png(padding=300_000)
    assert picture["Content-Type"] == "image/png"
    assert picture["X-Content-Type-Options"] == "nosniff"
    assert picture["Content-Security-Policy"] == "default-src 'none'; sandbox"
    assert picture["Content-Disposition"].startswith("inline;")

    tone = calls["c2"]
    page = (await client.get(reverse("chat:tool_call_detail", args=[made.pk, tone.pk]))).content
    assert f'<audio controls preload="none" src="{media_url(tone, 1)}"'.encode() in page
    sound = await client.get(media_url(tone, 1))
    assert sound["Content-Type"] == "audio/wav" and sound.content.startswith(b"RIFF")

    runbook = calls["c3"]
    page = (await client.get(reverse("chat:tool_call_detail", args=[made.pk, runbook.pk]))).content
    assert b"<code>docs://runbooks/deploy.md</code>" in page and b"Run `make deploy`." in page

    archive = calls["c4"]
    page = (await client.get(reverse("chat:tool_call_detail", args=[made.pk, archive.pk]))).content
    assert b'download="export.zip">Download export.zip</a>' in page
    download = await client.get(media_url(archive, 1))
    assert download["Content-Type"] == "application/octet-stream"
    assert download["Content-Disposition"] == 'attachment; filename="export.zip"'
    assert download.content.startswith(b"PK\x05\x06")

    link = calls["c5"]
    page = (await client.get(reverse("chat:tool_call_detail", args=[made.pk, link.pk]))).content
    assert b"Resource link</span> on-call <code>docs://oncall.md</code>" in page
    assert (await client.get(media_url(link, 1))).status_code == 404  # a link has no data
    assert (await client.get(media_url(chart, 2))).status_code == 404


async def test_the_media_follow_the_conversation_permission_rule(
    docs_http: McpHttpServer, hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    made, calls = await media_run(fake_openai, docs_http)
    url = media_url(calls["c1"], 1)
    teammate = await client_of(await database_sync_to_async(make.user)("grace"))
    assert (await teammate.get(url)).status_code == 404  # not shared: not found
    anonymous = await AsyncClient().get(url)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]

    made.shared = True
    await made.asave(update_fields=["shared"])
    shared = await teammate.get(url)
    assert shared.status_code == 200 and shared.content == png(padding=300_000)


async def test_the_admin_shows_the_raw_result_with_its_base64_shortened(
    docs_http: McpHttpServer, hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    made, calls = await media_run(fake_openai, docs_http)
    root = await database_sync_to_async(make.user)("root", is_staff=True, is_superuser=True)
    admin = await client_of(root)
    page = await admin.get(reverse("admin:chat_toolcall_change", args=[calls["c1"].pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "characters of base64)" in text and len(text) < 60_000
    transcript = await admin.get(reverse("admin:chat_conversation_change", args=[made.pk]))
    assert transcript.status_code == 200 and b"iVBORw0KGgo" not in transcript.content
    image = reverse("admin:chat_toolcall_media", args=[calls["c1"].pk, 1])
    assert f'<img src="{image}" alt="Image 1 from Chart (image/png)"'.encode() in transcript.content
    sound = reverse("admin:chat_toolcall_media", args=[calls["c2"].pk, 1])
    assert f'src="{sound}" aria-label="Sound 1 from Tone'.encode() in transcript.content
    assert b"Run `make deploy`." in transcript.content
    served = await admin.get(image)
    assert served["Content-Type"] == "image/png" and served.content == png(padding=300_000)

    clerk = await database_sync_to_async(make.user)("clerk", is_staff=True)
    refused = await (await client_of(clerk)).get(image)  # staff without "view tool call"
    assert refused.status_code == 403
