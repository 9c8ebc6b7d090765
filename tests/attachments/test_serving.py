"""A file from upload to the model and back: the upload's token in a send frame over a real
socket, and the stored file served to readers of the conversation only."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.test import Client
from django.urls import reverse

from chat.models import Conversation, Message
from chat.testing import factories as make
from chat.testing.sockets import DONE, connect, frames_until, send

from . import files as made_files

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sent() -> Message:
    """A message of ada's carrying an image and a CSV, sent as the composer sends them."""
    made = make.conversation(make.user("ada"), "Files")
    ada = make.logged_in(made.owner)
    tokens = [
        made_files.upload(ada, made, "chart.png", made_files.png(), "image/png").json()["token"],
        made_files.upload(ada, made, "sales.csv", b"region,total\nnorth,12\n", "text/csv").json()[
            "token"
        ],
    ]

    async def go() -> list[str]:
        socket = await connect(made.owner, made)
        await send(socket, "What do these say?", attachments=tokens)
        frames = await frames_until(socket, DONE)
        await socket.disconnect()
        return frames

    frames = asyncio.run(go())
    assert "You attached chart.png (an image); sales.csv (a text file)" in "".join(frames)
    return Message.objects.get(conversation=made, role="user")


def test_a_send_frame_carries_the_uploaded_files(sent: Message) -> None:
    assert sent.content == "What do these say?"
    assert [(a["name"], a["kind"], a["content_type"]) for a in sent.attachments] == [
        ("chart.png", "image", "image/png"),
        ("sales.csv", "text", "text/csv"),
    ]


def url(message: Message, number: int) -> str:
    return reverse("chat:attachment", args=[message.conversation_id, message.pk, number])


def test_the_owner_gets_an_image_inline_and_a_file_as_a_download(sent: Message) -> None:
    owner = make.logged_in(sent.conversation.owner)

    image = owner.get(url(sent, 1))
    table = owner.get(url(sent, 2))

    assert image.status_code == 200 and b"".join(image.streaming_content) == made_files.png()
    assert image["Content-Type"] == "image/png"
    assert image["Content-Disposition"] == 'inline; filename="chart.png"'
    assert table["Content-Type"] == "text/csv; charset=utf-8"
    assert table["Content-Disposition"] == 'attachment; filename="sales.csv"'
    for response in (image, table):
        assert response["X-Content-Type-Options"] == "nosniff"
        assert response["Content-Security-Policy"] == "default-src 'none'; sandbox"
        assert response["Cache-Control"].startswith("private")
    assert owner.get(url(sent, 3)).status_code == 404


def test_a_team_reader_of_a_shared_conversation_reads_its_files(sent: Message) -> None:
    bob = make.logged_in(make.user("bob"))
    assert bob.get(url(sent, 1)).status_code == 404
    Conversation.objects.filter(pk=sent.conversation_id).update(shared=True)

    assert bob.get(url(sent, 1)).status_code == 200
    # Reading is not writing: a team reader uploads nothing to it.
    refused = made_files.upload(bob, sent.conversation, "x.txt", b"hi", "text/plain")
    assert refused.status_code == 404


def test_strangers_and_anonymous_visitors_get_nothing(sent: Message) -> None:
    stranger = make.logged_in(make.user("mallory"))
    assert stranger.get(url(sent, 1)).status_code == 404
    anonymous = Client().get(url(sent, 1))
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    # A message of another conversation is not reached through one the visitor may read.
    own = make.conversation(stranger_user := make.user("eve"))
    wrong = reverse("chat:attachment", args=[own.pk, sent.pk, 1])
    assert make.logged_in(stranger_user).get(wrong).status_code == 404


def test_an_upload_refused_says_why_in_one_line(sent: Message) -> None:
    owner = make.logged_in(sent.conversation.owner)

    answer = made_files.upload(owner, sent.conversation, "photo.png", b"not an image", "image/png")

    assert answer.status_code == 400
    assert json.loads(answer.content) == {
        "error": "photo.png says it is an image, but its content is not one models take."
    }
