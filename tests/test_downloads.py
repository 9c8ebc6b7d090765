"""Downloading a conversation: Markdown, and one conversation's line of each export format, as
an attachment named after its title, for whoever may read it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from asgiref.sync import async_to_sync
from django.contrib.messages import get_messages
from django.http import StreamingHttpResponse
from django.test import AsyncClient, Client
from django.urls import reverse

from chat import agent, transcripts
from chat.downloads import filename
from chat.models import Conversation, Run
from chat.testing import factories as make
from chat.transcripts import export, markdown

pytestmark = pytest.mark.django_db


def url(made: Conversation, kind: str) -> str:
    return reverse("chat:conversation_download", args=[made.pk, kind])


def body(response: Any) -> str:
    """A streamed response's text (its pieces are read as a server would)."""
    assert response.streaming
    return b"".join(response.streaming_content).decode()


@pytest.fixture
def made() -> Conversation:
    conversation = make.conversation(
        make.user("ada"), "Trip: Paris / Tokyo?", enabled_tools=["get_current_time"]
    )
    run = Run.objects.create(conversation=conversation, status="completed", model="m-1")
    call = agent.ToolCall(id="call_1", name="get_current_time", arguments='{"timezone":"UTC"}')
    transcripts.append_messages(
        conversation,
        [
            agent.ChatMessage(role="user", content="What time is it?"),
            agent.ChatMessage(role="assistant", content=None, tool_calls=(call,)),
            agent.ChatMessage(role="tool", content="12:00", tool_call_id="call_1"),
            agent.ChatMessage(role="assistant", content="It is **noon**."),
        ],
        run=run,
    )
    return conversation


@pytest.mark.parametrize(
    ("kind", "content_type", "name"),
    [
        ("markdown", "text/markdown; charset=utf-8", "trip-paris-tokyo-{pk}.md"),
        ("openai", "application/json", "trip-paris-tokyo-{pk}.openai.json"),
        ("full", "application/json", "trip-paris-tokyo-{pk}.full.json"),
    ],
)
def test_each_format_is_an_attachment_named_after_the_title(
    made: Conversation, kind: str, content_type: str, name: str
) -> None:
    response = make.logged_in(made.owner).get(url(made, kind))
    assert response.status_code == 200
    assert response["Content-Type"] == content_type
    expected = name.format(pk=made.pk)
    assert response["Content-Disposition"] == f'attachment; filename="{expected}"'
    assert response["X-Content-Type-Options"] == "nosniff"


def test_the_files_are_the_export_formats_and_the_markdown(made: Conversation) -> None:
    owner = make.logged_in(made.owner)
    fetched = Conversation.objects.for_export(full=True).get(pk=made.pk)
    assert json.loads(body(owner.get(url(made, "full")))) == export.full_record(fetched)
    light = Conversation.objects.for_export(full=False).get(pk=made.pk)
    # Streamed a message at a time, the same text as the record encoded whole.
    openai = json.dumps(export.openai_record(light), ensure_ascii=False) + "\n"
    assert body(owner.get(url(made, "openai"))) == openai
    text = body(owner.get(url(made, "markdown")))
    assert text == markdown.text(made)
    assert "It is **noon**." in text and "### Tool · #2 · Get current time" in text


def test_a_teammate_downloads_a_shared_conversation_and_no_one_else_does(
    made: Conversation,
) -> None:
    bob = make.logged_in(make.user("bob"))
    assert bob.get(url(made, "markdown")).status_code == 404
    assert bob.get(url(made, "full")).status_code == 404
    Conversation.objects.filter(pk=made.pk).update(shared=True)
    assert bob.get(url(made, "markdown")).status_code == 200
    assert "Trip: Paris / Tokyo?" in json.loads(body(bob.get(url(made, "full"))))["title"]
    anonymous = Client().get(url(made, "markdown"))
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]


def test_an_unknown_format_or_a_post_is_refused(made: Conversation) -> None:
    owner = make.logged_in(made.owner)
    assert (
        owner.get(reverse("chat:conversation_download", args=[made.pk, "pdf"])).status_code == 404
    )
    assert owner.post(url(made, "markdown")).status_code == 405


def test_a_refused_openai_export_comes_back_to_the_page_with_the_reason(
    made: Conversation,
) -> None:
    run = Run.objects.create(conversation=made, status="in_progress", model="m-1")
    transcripts.append_messages(made, [agent.ChatMessage(role="user", content="And now?")], run=run)
    owner = make.logged_in(made.owner)
    response = owner.get(url(made, "openai"))
    assert response.status_code == 302
    assert response["Location"] == reverse("chat:conversation_detail", args=[made.pk])
    said = [str(message) for message in get_messages(response.wsgi_request)]
    assert said == [
        "JSON (openai) was not downloaded: a run is in progress; export it when it has finished."
    ]
    # Markdown and the full record say what there is so far.
    assert "still being written" in body(owner.get(url(made, "markdown")))
    assert owner.get(url(made, "full")).status_code == 200


def test_an_empty_conversation(made: Conversation) -> None:
    empty = make.conversation(made.owner, "")
    owner = make.logged_in(made.owner)
    assert "_No messages yet._" in body(owner.get(url(empty, "markdown")))
    response = owner.get(url(empty, "openai"))
    said = [str(message) for message in get_messages(response.wsgi_request)]
    assert said == ["JSON (openai) was not downloaded: no messages."]


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("", "conversation-{pk}-{pk}.md"),
        ("../../etc/passwd", "etcpasswd-{pk}.md"),
        ("Café au lait", "café-au-lait-{pk}.md"),
        ("x" * 300, "x" * 80 + "-{pk}.md"),
        ("🙂", "conversation-{pk}.md"),
    ],
)
def test_filenames_are_safe(title: str, expected: str) -> None:
    made = make.conversation(make.user("ada"), title)
    name = filename(made, "markdown")
    assert name == expected.format(pk=made.pk)
    assert "/" not in name and "\\" not in name and ".." not in name


def test_a_unicode_title_gets_an_ascii_fallback_in_the_header() -> None:
    made = make.conversation(make.user("ada"), "Café au lait")
    response = make.logged_in(made.owner).get(url(made, "markdown"))
    assert response["Content-Disposition"] == (
        f"attachment; filename*=utf-8''caf%C3%A9-au-lait-{made.pk}.md"
    )


@pytest.mark.django_db(transaction=True)
def test_under_asgi_the_file_streams_in_batches(made: Conversation, monkeypatch: Any) -> None:
    """An asynchronous body: Django would otherwise read the whole file before its first byte."""
    monkeypatch.setattr("chat.downloads.BATCH", 10)

    async def fetch() -> tuple[list[bytes], str]:
        client = AsyncClient()
        await client.aforce_login(made.owner)
        response = await client.get(url(made, "full"))
        streamed = cast(StreamingHttpResponse, response)
        pieces = [piece async for piece in cast(AsyncIterator[bytes], streamed.streaming_content)]
        return pieces, response["Content-Type"]

    pieces, content_type = async_to_sync(fetch)()
    assert content_type == "application/json" and len(pieces) > 3
    fetched = Conversation.objects.for_export(full=True).get(pk=made.pk)
    assert json.loads(b"".join(pieces)) == export.full_record(fetched)
