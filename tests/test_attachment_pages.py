"""Attached files in the pages: the composer's upload, a sent message's thumbnails and chips (the
transcript, its windows, a team reader, the admin), the first screen's form, and the inspector
showing an image's data URL short while Copy JSON keeps it whole."""

from __future__ import annotations

import asyncio
import base64
import html
import json
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import AsyncClient, Client
from django.urls import reverse

from chat import agents, runs
from chat.models import Conversation, Message, ProviderProfile
from chat.runs import tasks
from chat.testing import factories as make
from chat.testing.agents import default_agent_on
from chat.testing.approvals import on_provider
from chat.testing.openai_script import MODEL, text_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.transcripts import attachments as stored_files
from tests.attachments import files as made_files

pytestmark = pytest.mark.django_db(transaction=True)


def send(conversation: Conversation, content: str, *files: Any) -> Any:
    async def go() -> Any:
        handle = await runs.start_run(
            conversation=conversation, user=conversation.owner, content=content, attachments=files
        )
        return await handle.task

    return asyncio.run(go())


def sent(conversation: Conversation) -> Message:
    """A scripted turn that sent a PNG and a one-page PDF with its text."""
    chart = stored_files.admit_and_store("chart.png", made_files.png(), "image/png")
    spec = stored_files.admit_and_store("spec.pdf", made_files.pdf("Ship it"), "")
    run = send(conversation, "What is in these?", chart, spec)
    assert run.status == "completed", run.error
    return conversation.messages.get(role="user")


def test_the_upload_answers_a_token_and_the_facts_of_an_image_a_text_and_a_pdf(
    client_in: Client, user: Any
) -> None:
    conversation = make.conversation(user)
    cases = [
        ("chart.png", made_files.png(), "image/png", "image", 0),
        ("notes.csv", b"region,total\nnorth,12\n", "text/csv", "text", 0),
        ("spec.pdf", made_files.pdf("one", "two", "three"), "application/pdf", "pdf", 3),
    ]
    tokens = []
    for name, data, claimed, kind, pages in cases:
        response = made_files.upload(client_in, conversation, name, data, claimed)
        assert response.status_code == 200, response.content
        answer = response.json()
        assert answer["name"] == name and answer["kind"] == kind and answer["pages"] == pages
        assert answer["size"] == len(data) and answer["size_text"]
        tokens.append(answer["token"])

    values = stored_files.from_tokens(tokens, user.pk, conversation.pk)
    assert [value.name for value in values] == ["chart.png", "notes.csv", "spec.pdf"]


@pytest.mark.parametrize(
    ("name", "data", "claimed", "line"),
    [
        ("photo.png", b"just some text\n", "image/png", "photo.png"),
        ("empty.txt", b"", "text/plain", "empty.txt is empty."),
        ("big.txt", b"x" * 4096, "text/plain", "the limit is 1.0 KB"),
    ],
    ids=["mismatch", "empty", "over-limit"],
)
def test_a_refused_upload_is_400_with_one_line(
    client_in: Client, user: Any, settings: Any, name: str, data: bytes, claimed: str, line: str
) -> None:
    settings.AGENTLAB_MAX_ATTACHMENT_BYTES = 1024
    conversation = make.conversation(user)

    response = made_files.upload(client_in, conversation, name, data, claimed)

    assert response.status_code == 400
    error = response.json()["error"]
    assert line in error and "\n" not in error


def test_only_the_owner_uploads(user: Any) -> None:
    conversation = make.conversation(user)
    conversation.shared = True
    conversation.save()
    reader = make.logged_in(make.user("bea"))
    png = made_files.png()

    assert made_files.upload(reader, conversation, "a.png", png, "image/png").status_code == 404
    conversation.shared = False
    conversation.save()
    assert made_files.upload(reader, conversation, "a.png", png, "image/png").status_code == 404
    anonymous = made_files.upload(Client(), conversation, "a.png", png, "image/png")
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]


def test_the_transcript_shows_a_thumbnail_and_a_chip_that_lead_to_the_files(
    client_in: Client, user: Any
) -> None:
    conversation = make.conversation(user)
    message = sent(conversation)
    page = client_in.get(reverse("chat:conversation_detail", args=[conversation.pk]))
    text = page.content.decode()

    image_url = reverse("chat:attachment", args=[conversation.pk, message.pk, 1])
    pdf_url = reverse("chat:attachment", args=[conversation.pk, message.pk, 2])
    assert f'<img src="{image_url}" alt="chart.png" loading="lazy"' in text
    assert f'href="{image_url}" target="_blank"' in text
    assert f'href="{pdf_url}" download="spec.pdf"' in text
    assert "PDF · 1 page · " in text
    assert "You attached" in text  # the scripted model's reply
    served = client_in.get(image_url)
    assert served.status_code == 200 and served["Content-Type"] == "image/png"
    assert b"".join(served.streaming_content) == made_files.png()  # type: ignore[attr-defined]


def test_a_team_reader_and_an_earlier_window_show_the_files_too(user: Any) -> None:
    conversation = make.conversation(user)
    message = sent(conversation)
    for number in range(3):
        send(conversation, f"and then {number}?")
    conversation.shared = True
    conversation.save()
    reader = make.logged_in(make.user("bea"))
    image_url = reverse("chat:attachment", args=[conversation.pk, message.pk, 1])

    page = reader.get(reverse("chat:conversation_detail", args=[conversation.pk]))
    assert f'<img src="{image_url}"' in page.content.decode()
    assert 'class="attach-button"' not in page.content.decode()  # a reader attaches nothing
    assert reader.get(image_url).status_code == 200

    window = reader.get(reverse("chat:conversation_window", args=[conversation.pk]), {"before": 2})
    assert window.status_code == 200 and f'<img src="{image_url}"' in window.content.decode()


def test_the_composer_offers_attach_and_warns_of_a_model_that_takes_no_images(
    client_in: Client, user: Any, fake_openai: FakeOpenAIServer
) -> None:
    conversation = on_provider(fake_openai, user)
    url = reverse("chat:conversation_detail", args=[conversation.pk])
    page = client_in.get(url).content.decode()
    assert 'aria-label="Attach files"' in page
    assert f'data-upload-url="{reverse("chat:attachment_upload", args=[conversation.pk])}"' in page
    assert "data-images-refused" not in page  # not known: the server decides

    ProviderProfile.objects.filter(name="fake").update(accepts_images=False)
    page = client_in.get(url).content.decode()
    found = re.search(r'data-images-refused="([^"]*)"', page)
    assert found is not None
    assert html.unescape(found.group(1)).startswith(f"The model {MODEL} takes no images")
    assert "remove {names} or choose another model" in html.unescape(found.group(1))


def test_the_first_screen_warns_of_images_when_the_default_agent_takes_none(
    client_in: Client, user: Any
) -> None:
    """The first screen has no conversation yet: the endpoint it warns of is the one the new
    conversation would start with (the user's default agent's)."""
    first_screen = reverse("chat:conversation_list")
    assert "data-images-refused" not in client_in.get(first_screen).content.decode()

    blind = ProviderProfile.objects.create(
        name="blind", base_url="http://127.0.0.1:9/v1", model="text-only", accepts_images=False
    )
    default_agent_on(user, blind)
    page = client_in.get(first_screen).content.decode()
    assert "Welcome to Agent Lab" in page
    found = re.search(r'data-images-refused="([^"]*)"', page)
    assert found is not None
    assert html.unescape(found.group(1)).startswith("The model text-only takes no images")

    agents.choose_default(user=user, agent=None)  # the built-in Default: not known to refuse
    assert "data-images-refused" not in client_in.get(first_screen).content.decode()


async def test_the_first_screen_sends_its_files_with_the_first_message(user: Any) -> None:
    client = AsyncClient()
    await client.aforce_login(user)
    form = {
        "message": "",
        "attachments": [
            SimpleUploadedFile("chart.png", made_files.png(), content_type="image/png"),
            SimpleUploadedFile("notes.md", b"# Notes\n", content_type="text/markdown"),
        ],
    }

    response = await client.post(reverse("chat:conversation_create"), form)

    assert response.status_code == 302
    conversation = await Conversation.objects.aget(owner=user)
    run = await conversation.runs.aget()
    async with asyncio.timeout(10):
        while run.status == "in_progress":
            await asyncio.sleep(0.02)
            await run.arefresh_from_db()
    assert run.status == "completed", run.error
    first = await conversation.messages.aget(role="user")
    assert first.content == ""
    assert [item["name"] for item in first.attachments] == ["chart.png", "notes.md"]
    assert conversation.title == "chart.png"
    reply = await conversation.messages.aget(role="assistant")
    assert "You attached" in (reply.content or "")


@pytest.mark.parametrize(
    ("files", "line"),
    [
        (
            [("good.txt", b"fine", "text/plain"), ("fake.png", b"not an image", "image/png")],
            "fake.png",
        ),
        ([(f"n{i}.txt", b"note", "text/plain") for i in range(11)], "at most 10 files, not 11"),
    ],
    ids=["refused-file", "too-many"],
)
async def test_a_refused_first_screen_file_makes_nothing_and_keeps_the_text(
    user: Any, files: list[tuple[str, bytes, str]], line: str
) -> None:
    client = AsyncClient()
    await client.aforce_login(user)
    uploads = [SimpleUploadedFile(name, data, content_type=kind) for name, data, kind in files]

    response = await client.post(
        reverse("chat:conversation_create"), {"message": "look at this", "attachments": uploads}
    )

    assert response.status_code == 422
    page = response.content.decode()
    assert line in html.unescape(page) and 'role="alert"' in page
    assert "look at this</textarea>" in page
    assert 'enctype="multipart/form-data"' in page and 'name="attachments"' in page
    assert not await Conversation.objects.filter(owner=user).aexists()
    assert not default_storage.exists(stored_files.PREFIX)  # not even the file that passed


async def test_a_first_message_the_run_refuses_makes_nothing_and_keeps_the_text(
    user: Any,
) -> None:
    """A refusal after the conversation was made (here: the server is stopping) takes it back
    and shows the first screen again with the message."""
    client = AsyncClient()
    await client.aforce_login(user)
    tasks.stopping.set()
    try:
        response = await client.post(
            reverse("chat:conversation_create"), {"message": "still here?"}
        )
    finally:
        tasks.stopping.clear()

    assert response.status_code == 422
    page = html.unescape(response.content.decode())
    assert runs.lifecycle.STOPPING in page and "still here?</textarea>" in page
    assert not await Conversation.objects.filter(owner=user).aexists()


def test_the_admin_transcript_shows_the_files_and_serves_them_to_staff(
    staff: Client, user: Any
) -> None:
    conversation = make.conversation(user)
    message = sent(conversation)

    page = staff.get(reverse("admin:chat_conversation_change", args=[conversation.pk]))
    text = page.content.decode()

    image_url = reverse("admin:chat_message_attachment", args=[message.pk, 1])
    pdf_url = reverse("admin:chat_message_attachment", args=[message.pk, 2])
    assert f'<img src="{image_url}" alt="chart.png"' in text
    assert f'href="{pdf_url}" download="spec.pdf"' in text
    assert staff.get(image_url)["Content-Type"] == "image/png"
    pdf = staff.get(pdf_url)
    assert pdf["Content-Type"] == "application/pdf" and "attachment" in pdf["Content-Disposition"]
    assert make.logged_in(user).get(image_url).status_code == 302  # the admin is for staff only
    one = staff.get(reverse("admin:chat_message_change", args=[message.pk])).content.decode()
    assert f'<img src="{image_url}"' in one


def test_the_inspector_shows_a_data_url_short_and_copies_it_whole(
    client_in: Client, user: Any, fake_openai: FakeOpenAIServer
) -> None:
    conversation = on_provider(fake_openai, user)
    data = made_files.png(400, 300)
    chart = stored_files.admit_and_store("chart.png", data, "image/png")
    fake_openai.enqueue(text_turn("A blue chart."))
    run = send(conversation, "What is this?", chart)
    assert run.status == "completed", run.error

    page = client_in.get(reverse("chat:run_inspect", args=[conversation.pk, run.pk]))
    text = page.content.decode()

    url = f"data:image/png;base64,{base64.b64encode(data).decode()}"
    call = run.model_calls.get()
    shown = re.search(rf'<pre class="json" id="request-{call.pk}"[^>]*>(.*?)</pre>', text, re.S)
    whole = re.search(rf'<pre id="request-whole-{call.pk}" hidden>(.*?)</pre>', text, re.S)
    assert shown is not None and whole is not None
    assert url not in shown.group(1)
    assert f"data:image/png;base64,{url[22:27]}… ({len(url):,} characters)" in shown.group(1)
    assert json.loads(html.unescape(whole.group(1))) == fake_openai.requests[0].body
    assert f'data-copy="#request-whole-{call.pk}"' in text


def test_no_one_else_reads_a_message_file(user: Any) -> None:
    conversation = make.conversation(user)
    message = sent(conversation)
    url = reverse("chat:attachment", args=[conversation.pk, message.pk, 1])
    other = get_user_model().objects.create_user("mallory", password="pw-123456789")

    assert make.logged_in(other).get(url).status_code == 404
    assert make.logged_in(user).get(url.replace("/1/", "/3/")).status_code == 404
