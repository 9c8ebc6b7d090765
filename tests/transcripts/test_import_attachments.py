"""Attached files on their way in (chat/transcripts/inline.py through import_transcripts): an
openai line's image and file parts become attachments, and every bad file costs its line one
clear refusal, leaving no conversation and no file behind."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import LazySettings
from django.core.management import CommandError, call_command

from chat.models import Conversation, Message
from chat.testing import factories as make
from chat.transcripts import attachments
from tests.attachments import files as made

pytestmark = pytest.mark.django_db

CSV = b"region,total\nnorth,12\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def files_under(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


@pytest.fixture
def media(settings: LazySettings, tmp_path: Path) -> Path:
    root = tmp_path / "media"
    root.mkdir()
    settings.MEDIA_ROOT = root
    return root


def imported(line: dict[str, Any], tmp_path: Path) -> tuple[bool, list[str]]:
    """Whether the line was imported, and what import_transcripts said on stderr."""
    path = tmp_path / "line.jsonl"
    path.write_text(json.dumps(line) + "\n")
    err = StringIO()
    try:
        call_command("import_transcripts", str(path), "--user=ada", stdout=StringIO(), stderr=err)
    except CommandError:
        return False, err.getvalue().splitlines()
    return True, err.getvalue().splitlines()


def full_line(tmp_path: Path, settings: LazySettings) -> dict[str, Any]:
    """A full line whose first message carries a PNG and a CSV; exported, then its
    conversation deleted and the storage emptied (another site's)."""
    owner = make.user("ada")
    made.chat_with_files(
        owner,
        "files",
        "Look",
        "Seen.",
        ("chart.png", made.png(), "image/png"),
        ("notes.csv", CSV, "text/csv"),
    )
    out = StringIO()
    call_command("export_transcripts", "--format", "full", stdout=out, stderr=StringIO())
    Conversation.objects.all().delete()
    root = tmp_path / "empty"
    root.mkdir()
    settings.MEDIA_ROOT = root
    line: dict[str, Any] = json.loads(out.getvalue())
    return line


def test_an_openai_line_s_image_and_file_parts_become_attachments(
    tmp_path: Path, media: Path
) -> None:
    make.user("ada")
    heading = f"Attached file notes.csv (text/csv):\n\n{CSV.decode()}"
    content = [
        {"type": "text", "text": "Look"},
        image_part(f"data:image/png;base64,{b64(made.png())}"),
        {"type": "text", "text": heading},
        image_part(f"data:image/jpeg;base64,{b64(made.image('JPEG'))}"),
        {"type": "text", "text": "Attached file spec.pdf (PDF, 1 page, as text):\n\n[Page 1]"},
    ]
    line = {"messages": [{"role": "user", "content": content}, {"role": "assistant"}]}

    done, said = imported(line, tmp_path)

    assert done, said
    row = Message.objects.get(index=0)
    assert row.content == "Look\n\nAttached file spec.pdf (PDF, 1 page, as text):\n\n[Page 1]"
    values = attachments.stored_values(row.attachments)
    assert [(v.name, v.content_type, v.kind) for v in values] == [
        ("image-1.png", "image/png", "image"),
        ("notes.csv", "text/csv", "text"),
        ("image-2.jpg", "image/jpeg", "image"),
    ]
    assert attachments.read_bytes(values[0]) == made.png()
    assert attachments.read_bytes(values[1]) == CSV
    assert len(files_under(media)) == 3


FULL: dict[str, tuple[Callable[[list[dict[str, Any]]], Any], str]] = {
    "base64 that does not decode": (
        lambda files: files[0].update(data="not base64!"),
        "messages.0: attachments.0: chart.png: its data is not base64.",
    ),
    "a sha256 that is not the bytes'": (
        lambda files: files[1].update(sha256="0" * 64),
        "messages.0: attachments.1: notes.csv: its sha256 (0000000000000000…) is not that of "
        "its data (",
    ),
    "content not of the type claimed": (
        lambda files: files[1].update(data=b64(made.png())),
        "messages.0: attachments.1: notes.csv says it is a text file, but its content is an image.",
    ),
    "more than ten files": (
        lambda files: files.extend(files * 5),
        "messages.0: attachments: A message carries at most 10 files, not 12.",
    ),
    "a name with a folder": (
        lambda files: files[0].update(name="../chart.png"),
        "messages.0: attachments.0: ../chart.png: a file name cannot hold / or \\.",
    ),
    "a name with a control character": (
        lambda files: files[0].update(name="chart\x07.png"),
        "messages.0: attachments.0: chart?.png: a file name cannot hold control characters.",
    ),
    "a field that is no attachment's": (
        lambda files: files[0].update(content="a text in place of the image"),
        "messages.0: attachments.0.content: Extra inputs are not permitted",
    ),
}


@pytest.mark.parametrize("change, reason", FULL.values(), ids=FULL.keys())
def test_a_bad_file_in_a_full_line_costs_its_line_and_stores_nothing(
    change: Callable[[list[dict[str, Any]]], Any],
    reason: str,
    tmp_path: Path,
    settings: LazySettings,
) -> None:
    line = full_line(tmp_path, settings)
    change(line["messages"][0]["attachments"])

    done, said = imported(line, tmp_path)

    assert not done
    (refusal,) = said
    assert refusal.startswith(f"line 1: {reason}")
    assert not Conversation.objects.exists()
    assert files_under(Path(settings.MEDIA_ROOT)) == []


def test_a_file_over_the_limit_is_refused_before_it_is_decoded(
    tmp_path: Path, settings: LazySettings
) -> None:
    line = full_line(tmp_path, settings)
    settings.AGENTLAB_MAX_ATTACHMENT_BYTES = 20
    done, said = imported(line, tmp_path)
    assert not done
    (refusal,) = said
    assert refusal.startswith("line 1: messages.0: attachments.0: chart.png is 87")
    assert "the limit is 20" in refusal
    assert not Conversation.objects.exists() and files_under(Path(settings.MEDIA_ROOT)) == []


PNG_URL = f"data:image/png;base64,{b64(made.png())}"
OPENAI: dict[str, tuple[list[Any], str]] = {
    "an https image": (
        [image_part("https://example.com/cat.png")],
        "messages.0: content part 1: the image is at 'https://example.com/cat.png'; Agent Lab "
        "fetches nothing from other hosts: give it inline as a data: URL.",
    ),
    "a data URL that is not base64": (
        [image_part("data:image/png,%89PNG")],
        "messages.0: content part 1: an image must be a base64 data: URL, not ",
    ),
    "base64 that does not decode": (
        [image_part("data:image/png;base64,@@@@")],
        "messages.0: parts.0: image-1.png: its data is not base64.",
    ),
    "a PDF sent as an image": (
        [image_part(f"data:image/png;base64,{b64(made.pdf('x'))}")],
        "messages.0: parts.0: image-1.png says it is an image, but its content is a PDF.",
    ),
    "more than ten images": (
        [image_part(PNG_URL)] * 11,
        "messages.0: A message carries at most 10 files, not 11.",
    ),
    "a heading naming a folder": (
        [{"type": "text", "text": "Attached file a/b.txt (text/plain):\n\nhi"}],
        "messages.0: parts.0: a/b.txt: a file name cannot hold / or \\.",
    ),
}


@pytest.mark.parametrize("parts, reason", OPENAI.values(), ids=OPENAI.keys())
def test_a_bad_part_in_an_openai_line_costs_its_line_and_stores_nothing(
    parts: list[Any], reason: str, tmp_path: Path, media: Path
) -> None:
    make.user("ada")
    line = {"messages": [{"role": "user", "content": [{"type": "text", "text": "Look"}, *parts]}]}
    done, said = imported(line, tmp_path)
    assert not done
    assert said[0].startswith(f"line 1: {reason}"), said[0]
    assert not Conversation.objects.exists() and files_under(media) == []


def test_a_line_refused_after_its_files_passed_the_gate_stores_none(
    tmp_path: Path, media: Path
) -> None:
    make.user("ada")
    call = {"id": "c1", "type": "function", "function": {"name": "get_current_time"}}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Look"}, image_part(PNG_URL)]},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "user", "content": "and?"},
    ]
    done, said = imported({"messages": messages}, tmp_path)
    assert not done and "strict rules" in said[0]
    assert not Conversation.objects.exists() and files_under(media) == []


def test_a_files_message_of_another_role_is_refused(tmp_path: Path, media: Path) -> None:
    make.user("ada")
    messages = [
        {"role": "user", "content": "Look"},
        {"role": "assistant", "content": [image_part(PNG_URL)]},
    ]
    done, said = imported({"messages": messages}, tmp_path)
    assert not done and "content part of type 'image_url' is not supported" in said[0]
    assert files_under(media) == []


def test_the_part_of_an_image_gone_from_storage_stays_text(tmp_path: Path, media: Path) -> None:
    make.user("ada")
    gone = "Attached file chart.png (image/png):\n\n(no longer stored)"
    content = [{"type": "text", "text": "Look"}, {"type": "text", "text": gone}]
    done, said = imported({"messages": [{"role": "user", "content": content}]}, tmp_path)
    assert done, said
    row = Message.objects.get()
    assert (row.content, row.attachments) == (f"Look\n\n{gone}", [])
