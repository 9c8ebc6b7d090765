"""Real files for the attachment tests: PNGs made by Pillow, PDFs with text written by pypdf."""

from __future__ import annotations

import io
from typing import Any

from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from PIL import Image
from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

from chat import agent, transcripts
from chat.models import Conversation
from chat.testing import factories as make
from chat.transcripts import attachments


def png(width: int = 24, height: int = 16, colour: tuple[int, int, int] = (30, 120, 220)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, "PNG")
    return buffer.getvalue()


def image(kind: str, width: int = 8, height: int = 8) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 40, 40)).save(buffer, kind)
    return buffer.getvalue()


def pdf(*pages: str, password: str | None = None) -> bytes:
    """A PDF with one page per text, each text drawn with Helvetica (so pypdf reads it back)."""
    writer = PdfWriter()
    for text in pages:
        page = writer.add_blank_page(width=300, height=200)
        font = DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): writer._add_object(font)})}
        )
        stream = DecodedStreamObject()
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream.set_data(f"BT /F1 12 Tf 20 100 Td ({escaped}) Tj ET".encode())
        page[NameObject("/Contents")] = writer._add_object(stream)
    if password is not None:
        writer.encrypt(password)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def bomb() -> bytes:
    """A small PNG that decodes to 20,000 by 20,000 pixels (400 million)."""
    buffer = io.BytesIO()
    Image.new("1", (20_000, 20_000)).save(buffer, "PNG", optimize=True)
    return buffer.getvalue()


def upload(client: Client, conversation: Conversation, name: str, data: bytes, kind: str) -> Any:
    """The composer's upload of one file, answered with its token or its one refusal line."""
    url = reverse("chat:attachment_upload", args=[conversation.pk])
    return client.post(url, {"file": SimpleUploadedFile(name, data, content_type=kind)})


def chat_with_files(
    owner: Any, title: str, question: str, answer: str, *files: tuple[str, bytes, str]
) -> Conversation:
    """A conversation of one turn whose question carried these files (name, bytes, claimed
    type), each through the gate and stored."""
    conversation = make.conversation(owner, title)
    values = tuple(attachments.admit_and_store(*file) for file in files)
    transcripts.append_messages(
        conversation,
        [
            agent.ChatMessage(role="user", content=question, attachments=values),
            agent.ChatMessage(role="assistant", content=answer),
        ],
    )
    return conversation
