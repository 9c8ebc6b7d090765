"""Attached files inside a JSON line, and back through the gate.

A full transcript line and a case line carry each file of a user message inline: its stored
value's fields and `data`, the bytes in base64 (`"data": null, "missing": true` for a file gone
from storage, so the rest still exports). An openai line carries the content parts a request
sends: an `image_url` part with a data URL, a text part headed "Attached file NAME (TYPE):".

On import both come back through the one gate (`files.admit`), under the composer's limits: the
bytes are judged, not the claims, and a given sha256 must be the bytes'. Reading a line stores
nothing; the importer stores the admitted files (`store`) with its rows, so a refused line leaves
no file behind.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final, Self

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationInfo, model_validator

from chat import agent
from chat.agent.messages import AttachmentKind

from . import attachments, files
from .files import Admitted, Refused
from .limits import Count, Name, importing

HEADING: Final = re.compile(
    r"Attached file (?P<name>[^\n]+?) \((?P<type>[\w.+-]+/[\w.+-]+)\):\n\n(?P<text>.*)\Z", re.S
)
"""A text file's part as `Attachment.to_openai` writes it. A PDF's part ("(PDF, 2 pages, as
text)") has no type and stays text: the PDF itself is not in the line; so does an image's (the
line of an image gone from storage: "(no longer stored)")."""
DATA_URL: Final = re.compile(
    r"data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>[^,]*),(?P<data>.*)\Z", re.S
)
SUFFIXES: Final = {"image/jpeg": "jpg"}


class InlineFile(BaseModel):
    """A file given in a line: its name, the type it claims and its bytes in base64."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    content_type: Name = ""
    data: str | None = None
    _admitted: Admitted | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _through_the_gate(self, info: ValidationInfo) -> Self:
        if importing(info) and self.data is not None:
            self._admitted = admit_inline(
                self.name, self.data, self.content_type, getattr(self, "sha256", None)
            )
        return self

    @property
    def admitted(self) -> Admitted | None:
        """What the gate made of it on import; None when it was not read as an import."""
        return self._admitted

    def value(self) -> agent.Attachment:
        if self._admitted is None:
            raise ValueError(f"{self.name} has no content")
        return self._admitted.attachment.stored()


class AttachmentRecord(InlineFile):
    """An attachment as a full line or a case keeps it: the stored value's fields, and on the
    way out or in its bytes (`data`). Read as stored (no import), the value is the fields."""

    size: Count
    sha256: Name
    kind: AttachmentKind
    pages: Count = 0
    missing: bool = False

    @model_validator(mode="before")
    @classmethod
    def _as_stored(cls, data: Any, info: ValidationInfo) -> Any:
        """A stored value's empty `content` is no field of a line (an imported one refuses it)."""
        if isinstance(data, dict) and not importing(info) and data.get("content") is None:
            return {key: item for key, item in data.items() if key != "content"}
        return data

    def value(self) -> agent.Attachment:
        if self._admitted is not None:
            return self._admitted.attachment.stored()
        return agent.Attachment(
            name=self.name,
            content_type=self.content_type,
            size=self.size,
            sha256=self.sha256,
            kind=self.kind,
            pages=self.pages,
        )


def admit_inline(name: str, data: str, claimed_type: str, sha256: str | None = None) -> Admitted:
    """The gate's answer for a file given as base64, or Refused with one line."""
    name = files.checked_name(name)
    if len(data) > 4 * (files.max_bytes() // 3 + 1):  # refused before it is decoded
        files.check_size(name, len(data) * 3 // 4)
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise Refused(f"{name}: its data is not base64.") from None
    found = files.admit(name, raw, claimed_type)
    if sha256 is not None and found.attachment.sha256 != sha256:
        raise Refused(
            f"{name}: its sha256 ({sha256[:16]}…) is not that of its data "
            f"({found.attachment.sha256[:16]}…)."
        )
    return found


def kept(
    records: list[AttachmentRecord], where: str, info: ValidationInfo
) -> list[AttachmentRecord]:
    """An imported message's attachments without those the line has no bytes for (a file that
    was missing where it was exported), each with a note for the reader; as stored, all."""
    if not importing(info):
        return records
    notes = (info.context or {}).setdefault("notes", [])
    for record in records:
        if record.data is None:
            notes.append(f"{where}: {record.name} was not in the export (missing): left out")
    return [record for record in records if record.data is not None]


def counted(value: Any) -> Any:
    """A message's attachments, refused past the composer's count before any is read."""
    if isinstance(value, list):
        files.check_count(len(value))
    return value


def split_parts(content: list[Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    """A user message's content parts as the parts that stay text and the files the others
    give (`InlineFile` fields): an `image_url` data URL is an image named `image-N.EXT`, a text
    part under a text file's heading that file. Raises Refused for an image that is not inline
    (Agent Lab fetches nothing from other hosts)."""
    texts: list[Any] = []
    found: list[dict[str, Any]] = []
    images = 0
    for position, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "image_url":
            images += 1
            found.append(_image(part.get("image_url"), images, position))
        elif (
            kind == "text"
            and isinstance(text := part.get("text"), str)
            and (heading := HEADING.match(text))
            and not heading.group("type").startswith("image/")
        ):
            body = heading.group("text").encode("utf-8")
            found.append(
                {
                    "name": heading.group("name"),
                    "content_type": heading.group("type"),
                    "data": base64.b64encode(body).decode(),
                }
            )
        else:
            texts.append(part)
    files.check_count(len(found))
    return texts, found


def _image(given: Any, number: int, position: int) -> dict[str, Any]:
    url = given.get("url") if isinstance(given, dict) else given
    if not isinstance(url, str):
        raise Refused(f"content part {position}: an image_url part needs a url.")
    if url.startswith(("https:", "http:")):
        raise Refused(
            f"content part {position}: the image is at {url[:60]!r}; Agent Lab fetches nothing "
            "from other hosts: give it inline as a data: URL."
        )
    found = DATA_URL.match(url)
    if found is None or not found.group("params").endswith(";base64"):
        raise Refused(
            f"content part {position}: an image must be a base64 data: URL, not {url[:30]!r}."
        )
    content_type = found.group("type") or ""
    suffix = SUFFIXES.get(content_type, content_type.partition("/")[2] or "bin")
    return {
        "name": f"image-{number}.{suffix[:10]}",
        "content_type": content_type,
        "data": found.group("data"),
    }


def inline(value: agent.Attachment) -> dict[str, Any]:
    """A stored value as a line carries it, its bytes read from storage now."""
    fields = value.stored().model_dump(mode="json", exclude={"content"})
    try:
        data = attachments.read_bytes(value)
    except OSError:
        return {**fields, "data": None, "missing": True}
    return {**fields, "data": base64.b64encode(data).decode()}


def with_data(message: dict[str, Any]) -> dict[str, Any]:
    """A message's fields with each attachment's bytes inline; no `attachments` key when it
    has none (as lines written before attachments)."""
    stored = message.get("attachments")
    if not stored:
        return {key: item for key, item in message.items() if key != "attachments"}
    return {
        **message,
        "attachments": [inline(value) for value in attachments.stored_values(stored)],
    }


def case_message(message: agent.ChatMessage) -> dict[str, Any]:
    """A message as a case keeps it: its OpenAI shape with the text as `content`, its files'
    stored values under `attachments` (read back by `messages.OpenAIMessage`)."""
    if not message.attachments:
        return message.to_openai()
    text = message.model_copy(update={"attachments": ()}).to_openai()
    return {
        **text,
        "attachments": [
            a.stored().model_dump(mode="json", exclude={"content"}) for a in message.attachments
        ],
    }


def store(found: Iterable[Admitted]) -> None:
    """Keep admitted files (call it last in the transaction that writes their rows)."""
    for item in found:
        attachments.store(item)


def admitted_of(groups: Sequence[Iterable[InlineFile]]) -> list[Admitted]:
    return [item.admitted for group in groups for item in group if item.admitted is not None]
