"""manage.py chat --attach: files from the terminal through the same gate and run path."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.conf import LazySettings
from django.core.files.storage import default_storage
from django.core.management import CommandError, call_command

from chat.models import Conversation, Message, ProviderProfile
from chat.testing import factories as make
from chat.testing.approvals import on_provider
from chat.testing.openai_script import text_only, text_turn
from chat.testing.openai_server import FakeOpenAIServer

from . import files as made_files

pytestmark = pytest.mark.django_db(transaction=True)


def chat(*args: str) -> str:
    out = StringIO()
    call_command("chat", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def written(folder: Path, name: str, data: bytes) -> str:
    path = folder / name
    path.write_bytes(data)
    return str(path)


def stored_files() -> list[str]:
    if not default_storage.exists("attachments"):
        return []
    return [
        name
        for folder in default_storage.listdir("attachments")[0]
        for name in default_storage.listdir(f"attachments/{folder}")[1]
    ]


def test_attach_sends_each_file_to_the_provider(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.enqueue(text_turn("A chart and its notes."))
    image = written(tmp_path, "chart.png", made_files.png())
    notes = written(tmp_path, "notes.md", b"# Q3\nUp 4%.\n")

    out = chat(
        "What is in this?",
        "--attach", image, "--attach", notes,
        "--base-url", fake_openai.base_url, "--model", "m-1", "--json",
    )  # fmt: skip

    assert json.loads(out)["text"] == "A chart and its notes."
    parts = fake_openai.requests[0].body["messages"][-1]["content"]
    assert [part["type"] for part in parts] == ["text", "image_url", "text"]
    assert parts[2]["text"] == "Attached file notes.md (text/markdown):\n\n# Q3\nUp 4%.\n"
    message = Message.objects.get(role="user")
    assert [a["name"] for a in message.attachments] == ["chart.png", "notes.md"]


def test_the_scripted_model_names_what_was_attached(tmp_path: Path) -> None:
    spec = written(tmp_path, "spec.pdf", made_files.pdf("One", "Two", "Three"))

    out = chat("Summarise", "--attach", spec)

    assert "You attached spec.pdf (a PDF of 3 pages)" in out


@pytest.mark.parametrize(
    ("name", "data", "line"),
    [
        ("photo.png", b"words", "photo.png says it is an image, but its content is not one"),
        ("empty.txt", b"", "empty.txt is empty."),
        ("song.mp3", b"ID3\x04\x00" + bytes(range(200)), "song.mp3: audio/mpeg cannot be sent"),
    ],
)
def test_a_refused_file_stops_the_command_before_anything_is_stored(
    tmp_path: Path, name: str, data: bytes, line: str
) -> None:
    good = written(tmp_path, "good.txt", b"fine")
    bad = written(tmp_path, name, data)

    with pytest.raises(CommandError) as refused:
        chat("Look", "--attach", good, "--attach", bad)

    assert str(refused.value).startswith(line)
    assert not Conversation.objects.exists() and stored_files() == []


def test_limits_and_missing_files(tmp_path: Path, settings: LazySettings) -> None:
    settings.AGENTLAB_MAX_ATTACHMENT_BYTES = 10
    big = written(tmp_path, "big.txt", b"x" * 11)
    with pytest.raises(CommandError, match=r"^big.txt is 11 bytes; the limit is 10 bytes\.$"):
        chat("Look", "--attach", big)
    with pytest.raises(CommandError, match=r"nothing.txt: No such file or directory\.$"):
        chat("Look", "--attach", str(tmp_path / "nothing.txt"))
    small = written(tmp_path, "a.txt", b"a")
    with pytest.raises(CommandError, match=r"^A message carries at most 10 files, not 11\.$"):
        chat("Look", *[arg for _ in range(11) for arg in ("--attach", small)])
    with pytest.raises(CommandError, match="--attach goes with a new message"):
        chat("--regenerate", "--conversation", "1", "--attach", small)
    assert not Conversation.objects.exists() and stored_files() == []


def test_a_model_known_to_take_no_images_is_refused_at_the_terminal(
    tmp_path: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.checks.append(text_only)
    made = on_provider(fake_openai, make.user("ada"))
    ProviderProfile.objects.filter(pk=made.profile_id).update(accepts_images=False)
    image = written(tmp_path, "chart.png", made_files.png())

    with pytest.raises(CommandError, match="The model fake-model takes no images"):
        chat("What is this?", "--conversation", str(made.pk), "--attach", image)

    assert fake_openai.requests == [] and not made.messages.exists()
