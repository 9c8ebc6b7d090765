"""The one gate for a file a person attaches: what it is, judged by its bytes, not its name.

`admit` takes a name, the bytes and the type the sender claims, and returns an `agent.Attachment`
(with what the model will read of it) or raises `Refused` with one line that names the file and
the reason. Images are decoded within a pixel cap (a decompression bomb is refused before it
costs memory), a PDF is parsed for its page count and text, a text file must be UTF-8. The upload
view, the importers and `manage.py chat --attach` all pass here.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import mimetypes
import unicodedata
import warnings
from dataclasses import dataclass
from typing import Final

from django.conf import settings
from django.template.defaultfilters import filesizeformat

from chat import agent
from chat.agent.messages import MAX_ATTACHMENTS

NAME_CHARS: Final = 200
MAX_PIXELS: Final = 40_000_000
"""The most pixels an image may decode to (an 8000 by 5000 photo): a model scales images far
below this, and a small file claiming more is a decompression bomb."""
IMAGE_TYPES: Final = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif"} | {
    "WEBP": "image/webp"
}
"""The image formats the Chat Completions API takes, by Pillow's name for them."""
TEXT_TYPES: Final = {
    ".txt": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".json": "application/json",
    ".jsonl": "application/jsonl",
    ".log": "text/plain",
    ".html": "text/html",
    ".xml": "application/xml",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
}
"""Text types by extension; any other UTF-8 file (source code, a Makefile) is text/plain."""
ACCEPTED: Final = "images (PNG, JPEG, GIF, WebP), text files or PDFs"


class Refused(ValueError):
    """A file that is not attached, and the one line that says why."""


@dataclass(frozen=True, slots=True)
class Admitted:
    """A file that passed: the value a message carries (its `content` loaded) and the text
    kept beside the bytes for a PDF (what a request reads, without parsing the PDF again)."""

    attachment: agent.Attachment
    data: bytes
    text: str | None = None


def max_bytes() -> int:
    return int(settings.AGENTLAB_MAX_ATTACHMENT_BYTES)


def checked_name(name: str) -> str:
    """A file name as the sender gave it, or Refused: no folders, no control characters."""
    shown = name if len(name) <= 60 else f"{name[:57]}…"
    shown = "".join(c if c.isprintable() else "?" for c in shown)
    if not name.strip():
        raise Refused("A file has no name.")
    if any(c in name for c in "/\\"):
        raise Refused(f"{shown}: a file name cannot hold / or \\.")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in name):
        raise Refused(f"{shown}: a file name cannot hold control characters.")
    if name.strip(". ") == "":
        raise Refused(f"{shown}: not a file name.")
    if len(name) > NAME_CHARS:
        raise Refused(f"{shown}: the name is longer than {NAME_CHARS} characters.")
    return name


def size_text(size: int) -> str:
    """A size as people read it ("1.2 MB"), with a plain space (lines go to terminals too)."""
    return str(filesizeformat(size)).replace("\xa0", " ")


def check_count(count: int) -> None:
    if count > MAX_ATTACHMENTS:
        raise Refused(f"A message carries at most {MAX_ATTACHMENTS} files, not {count}.")


def check_size(name: str, size: int) -> None:
    """Refused for an empty file or one over the limit (before its bytes are read)."""
    if size == 0:
        raise Refused(f"{name} is empty.")
    if size > max_bytes():
        raise Refused(f"{name} is {size_text(size)}; the limit is {size_text(max_bytes())}.")


def admit(name: str, data: bytes, claimed_type: str = "") -> Admitted:
    """The attachment `data` makes, or Refused with the reason."""
    name = checked_name(name)
    check_size(name, len(data))
    claimed = _claimed_kind(name, claimed_type)
    sha256 = hashlib.sha256(data).hexdigest()
    if (image_type := _image_type(name, data)) is not None:
        if claimed not in ("image", ""):
            raise _mismatch(name, claimed, "an image")
        content = f"data:{image_type};base64,{base64.b64encode(data).decode()}"
        return Admitted(_value(name, image_type, data, sha256, "image", content=content), data)
    if data.startswith(b"%PDF-"):
        if claimed not in ("pdf", ""):
            raise _mismatch(name, claimed, "a PDF")
        pages, text = _pdf_text(name, data)
        value = _value(name, "application/pdf", data, sha256, "pdf", pages=pages, content=text)
        return Admitted(value, data, text)
    if claimed == "image":
        raise Refused(f"{name} says it is an image, but its content is not one models take.")
    if claimed == "pdf":
        raise Refused(f"{name} says it is a PDF, but its content is not a PDF.")
    if claimed == "other":
        kind = claimed_type or mimetypes.guess_type(name, strict=False)[0] or "this type"
        raise Refused(f"{name}: {kind} cannot be sent to a model; attach {ACCEPTED}.")
    text = _text(name, data)
    content_type = _text_type(name)
    if content_type == "application/json":
        try:
            json.loads(text)
        except ValueError:
            raise Refused(f"{name} says it is JSON, but its content is not valid JSON.") from None
    return Admitted(_value(name, content_type, data, sha256, "text", content=text), data)


def _value(
    name: str,
    content_type: str,
    data: bytes,
    sha256: str,
    kind: agent.messages.AttachmentKind,
    *,
    pages: int = 0,
    content: str,
) -> agent.Attachment:
    return agent.Attachment(
        name=name,
        content_type=content_type,
        size=len(data),
        sha256=sha256,
        kind=kind,
        pages=pages,
        content=content,
    )


def _claimed_kind(name: str, claimed_type: str) -> str:
    """What the sender says the file is (image, pdf, text, other), or "" when it says nothing
    this gate knows: the browser's type first, else the extension's."""
    claimed_type = claimed_type.split(";")[0].strip().lower()
    if not claimed_type or claimed_type == "application/octet-stream":
        claimed_type = mimetypes.guess_type(name, strict=False)[0] or ""
    if claimed_type.startswith("image/"):
        return "image"
    if claimed_type == "application/pdf":
        return "pdf"
    if _is_text_type(claimed_type) or _extension(name) in TEXT_TYPES:
        return "text"
    if claimed_type.startswith(("audio/", "video/", "font/")) or claimed_type in _BINARY:
        return "other"
    return ""


_BINARY: Final = frozenset(
    {
        "application/zip",
        "application/gzip",
        "application/x-tar",
        "application/x-7z-compressed",
        "application/x-rar-compressed",
        "application/vnd.rar",
        "application/x-msdownload",
        "application/x-executable",
        "application/msword",
        "application/vnd.ms-excel",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    }
)


def _is_text_type(content_type: str) -> bool:
    return content_type.startswith("text/") or content_type in (
        "application/json",
        "application/xml",
        "application/javascript",
        "application/x-sh",
        "application/x-python",
        "application/toml",
        "application/yaml",
    )


def _extension(name: str) -> str:
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


def _text_type(name: str) -> str:
    return TEXT_TYPES.get(_extension(name), "text/plain")


def _mismatch(name: str, claimed: str, actual: str) -> Refused:
    said = {"text": "a text file", "image": "an image", "pdf": "a PDF"}.get(claimed, "another type")
    return Refused(f"{name} says it is {said}, but its content is {actual}.")


def _image_type(name: str, data: bytes) -> str | None:
    """The image's content type when `data` is an image a model takes; None when it is no
    image at all; Refused for an image that cannot be (another format, a bomb, broken)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                kind = image.format or ""
                width, height = image.size
                if kind not in IMAGE_TYPES:
                    raise Refused(
                        f"{name} is a {kind or 'kind of'} image; models take PNG, JPEG, GIF "
                        "or WebP."
                    )
                if width * height > MAX_PIXELS:
                    raise _bomb(name, width, height)
                image.load()
    except UnidentifiedImageError:
        return None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise Refused(f"{name} decodes to more pixels than any model reads.") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        if isinstance(exc, Refused):
            raise
        raise Refused(f"{name} is a broken image: {_reason(exc)}.") from None
    return IMAGE_TYPES[kind]


def _bomb(name: str, width: int, height: int) -> Refused:
    return Refused(
        f"{name} is {width:,} by {height:,} pixels, more than any model reads "
        f"(at most {MAX_PIXELS // 1_000_000} million); not attached."
    )


def _pdf_text(name: str, data: bytes) -> tuple[int, str]:
    """The page count and text of a PDF, or Refused when it does not parse."""
    import logging

    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            raise Refused(f"{name} is an encrypted PDF; its text cannot be read.")
        texts = [page.extract_text() or "" for page in reader.pages]
    except Refused:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise Refused(f"{name} could not be read as a PDF: {_reason(exc)}.") from None
    if not texts:
        raise Refused(f"{name} could not be read as a PDF: it has no pages.")
    text = "\n\n".join(
        f"[Page {number}]\n{page.strip()}" for number, page in enumerate(texts, start=1)
    )
    return len(texts), text.replace("\x00", "")


def _text(name: str, data: bytes) -> str:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise Refused(
            f"{name}: this type cannot be sent to a model (it is not UTF-8 text); "
            f"attach {ACCEPTED}."
        ) from None
    if "\x00" in text:
        raise Refused(f"{name}: binary content cannot be sent to a model; attach {ACCEPTED}.")
    return text


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:120].rstrip(".")
