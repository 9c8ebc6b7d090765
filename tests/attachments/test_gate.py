"""The one gate for attached files: what passes, and one clear line for everything else."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from django.conf import LazySettings

from chat.transcripts import files
from chat.transcripts.files import Refused, admit

from . import files as make


def refused(name: str, data: bytes, claimed: str = "") -> str:
    with pytest.raises(Refused) as raised:
        admit(name, data, claimed)
    line = str(raised.value)
    assert "\n" not in line and line.endswith((".", ")")), line
    return line


def test_an_image_becomes_a_data_url_of_its_own_type_whatever_its_name_says() -> None:
    data = make.png()

    admitted = admit("screen shot.png", data, "image/png")

    value = admitted.attachment
    assert (value.kind, value.content_type, value.size) == ("image", "image/png", len(data))
    assert value.sha256 == hashlib.sha256(data).hexdigest()
    assert value.content == f"data:image/png;base64,{base64.b64encode(data).decode()}"
    assert admitted.data == data and admitted.text is None
    for kind in ("JPEG", "GIF", "WEBP"):
        value = admit(f"a.{kind.lower()}", make.image(kind)).attachment
        assert value.content_type == f"image/{kind.lower()}"


def test_text_files_are_read_as_utf8_with_a_type_by_extension() -> None:
    cases = {
        "notes.md": ("# Notes\n", "text/markdown"),
        "sales.csv": ("region,total\nnorth,12\n", "text/csv"),
        "config.json": ('{"a": [1, 2]}', "application/json"),
        "server.log": ("12:00 started\n", "text/plain"),
        "main.py": ("print('hé')\n", "text/plain"),
        "Makefile": ("all:\n\ttrue\n", "text/plain"),
    }
    for name, (text, content_type) in cases.items():
        value = admit(name, text.encode()).attachment
        assert (value.kind, value.content_type, value.content) == ("text", content_type, text)
    # A byte-order mark is not part of the text.
    assert admit("bom.txt", b"\xef\xbb\xbfhello").attachment.content == "hello"


def test_a_pdf_is_its_text_page_by_page_with_its_page_count() -> None:
    admitted = admit("spec.pdf", make.pdf("Deploy on Fridays", "Never on Mondays"))

    value = admitted.attachment
    assert (value.kind, value.content_type, value.pages) == ("pdf", "application/pdf", 2)
    assert admitted.text == "[Page 1]\nDeploy on Fridays\n\n[Page 2]\nNever on Mondays"
    assert value.to_openai() == {
        "type": "text",
        "text": f"Attached file spec.pdf (PDF, 2 pages, as text):\n\n{admitted.text}",
    }


@pytest.mark.parametrize(
    ("name", "data", "claimed", "line"),
    [
        ("photo.png", b"just words", "image/png", "photo.png says it is an image, but its content"),
        ("report.pdf", b"just words", "application/pdf", "report.pdf says it is a PDF, but its"),
        ("data.csv", make.png(), "text/csv", "data.csv says it is a text file, but its content is"),
        ("notes.txt", make.pdf("x"), "text/plain", "notes.txt says it is a text file, but its"),
        ("pic.jpg", make.pdf("x"), "image/jpeg", "pic.jpg says it is an image, but its content"),
        ("broken.json", b'{"a": ', "", "broken.json says it is JSON, but its content is not valid"),
    ],
)
def test_content_that_does_not_match_its_claimed_type(
    name: str, data: bytes, claimed: str, line: str
) -> None:
    assert refused(name, data, claimed).startswith(line)


def test_an_empty_file_and_one_over_the_limit(settings: LazySettings) -> None:
    assert refused("empty.txt", b"") == "empty.txt is empty."
    settings.AGENTLAB_MAX_ATTACHMENT_BYTES = 1000
    assert refused("big.txt", b"a" * 1001) == "big.txt is 1001 bytes; the limit is 1000 bytes."
    assert admit("fits.txt", b"a" * 1000).attachment.size == 1000


def test_a_decompression_bomb_posing_as_an_image() -> None:
    data = make.bomb()
    assert len(data) < 100_000
    assert refused("cat.png", data, "image/png") == (
        "cat.png decodes to more pixels than any model reads."
    )
    # Under Pillow's own alarm but over the gate's cap: refused before it is decoded.
    line = refused("wide.png", make.image("PNG", 9000, 5000))
    assert line == (
        "wide.png is 9,000 by 5,000 pixels, more than any model reads (at most 40 million); "
        "not attached."
    )


def test_broken_images_and_pdfs() -> None:
    truncated = make.png(64, 64)[:60]
    assert refused("cut.png", truncated).startswith("cut.png is a broken image: ")
    assert refused("bad.pdf", b"%PDF-1.7\nthis is not a pdf").startswith(
        "bad.pdf could not be read as a PDF: "
    )
    assert refused("locked.pdf", make.pdf("secret", password="pw")) == (
        "locked.pdf is an encrypted PDF; its text cannot be read."
    )
    assert refused("old.bmp", make.image("BMP")) == (
        "old.bmp is a BMP image; models take PNG, JPEG, GIF or WebP."
    )


def test_types_a_model_cannot_read_are_refused_with_what_it_takes() -> None:
    zipped = b"PK\x03\x04" + bytes(range(256))
    assert refused("archive.zip", zipped, "application/zip") == (
        "archive.zip: application/zip cannot be sent to a model; attach images (PNG, JPEG, GIF, "
        "WebP), text files or PDFs."
    )
    assert refused("blob.bin", bytes(range(256))).startswith(
        "blob.bin: this type cannot be sent to a model (it is not UTF-8 text)"
    )
    assert refused("nul.txt", b"a\x00b").startswith("nul.txt: binary content cannot be sent")


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("../etc/passwd", "../etc/passwd: a file name cannot hold / or \\."),
        ("C:\\temp\\a.txt", "C:\\temp\\a.txt: a file name cannot hold / or \\."),
        ("bell\x07.txt", "bell?.txt: a file name cannot hold control characters."),
        ("line\nbreak.txt", "line?break.txt: a file name cannot hold control characters."),
        ("rtl\u202egnp.txt", "rtl?gnp.txt: a file name cannot hold control characters."),
        ("  ", "A file has no name."),
        ("..", "..: not a file name."),
        ("a" * 201 + ".txt", "a" * 57 + "…: the name is longer than 200 characters."),
    ],
)
def test_names_with_folders_or_control_characters(name: str, line: str) -> None:
    assert refused(name, b"hello") == line


def test_at_most_ten_files_a_message() -> None:
    files.check_count(10)
    with pytest.raises(Refused, match=r"^A message carries at most 10 files, not 11\.$"):
        files.check_count(11)


def test_json_lines_are_text_not_validated_as_one_document() -> None:
    value = admit("events.jsonl", b'{"a": 1}\n{"a": 2}\n').attachment
    assert value.content_type == "application/jsonl"
    assert json.loads(value.content.splitlines()[1]) == {"a": 2}
