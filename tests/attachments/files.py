"""Real files for the attachment tests: PNGs made by Pillow, PDFs with text written by pypdf."""

from __future__ import annotations

import io

from PIL import Image
from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject


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
