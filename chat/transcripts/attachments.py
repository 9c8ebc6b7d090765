"""Attachments kept in Django's storage, and what a request reads of them.

A file is stored once under its content address (`attachments/ab/<sha256>`), whoever attached it
and however often: versions, forks, cases and imports copy the message's value, never the
bytes. A PDF's text is kept beside it (`<sha256>.txt`), so a request reads it without parsing the
PDF again. An upload is answered with a signed token naming the value; the send frame carries
the tokens, so no row exists for a file nobody sent (`manage.py prune` removes such files).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Final

from django.core import signing
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from pydantic import ValidationError

from chat import agent

from .files import Admitted, Refused, admit, check_count

PREFIX: Final = "attachments"
TOKEN_MAX_AGE: Final = 24 * 3600
"""How long an uploaded file waits to be sent; `manage.py prune` removes it after that."""
_SALT: Final = "chat.attachment"


def path(sha256: str, suffix: str = "") -> str:
    return f"{PREFIX}/{sha256[:2]}/{sha256}{suffix}"


def store(admitted: Admitted) -> agent.Attachment:
    """Keep a file's bytes (and a PDF's text) under its content address; the stored value."""
    value = admitted.attachment
    if admitted.text is not None:
        _save(path(value.sha256, ".txt"), admitted.text.encode("utf-8", "replace"))
    _save(path(value.sha256), admitted.data)
    return value.stored()


def _save(name: str, data: bytes) -> None:
    if default_storage.exists(name):
        _touch(name)
        return
    saved = default_storage.save(name, ContentFile(data))
    if saved != name:  # another process stored the same bytes first
        default_storage.delete(saved)


def _touch(name: str) -> None:
    """Mark a file stored again as new, so `unsent` waits a day from this upload too (where the
    storage has local paths; elsewhere a send after a prune asks to attach the file again)."""
    with contextlib.suppress(NotImplementedError, OSError):
        os.utime(default_storage.path(name))


def admit_and_store(name: str, data: bytes, claimed_type: str = "") -> agent.Attachment:
    """The gate and the storage in one step, for importers and commands."""
    return store(admit(name, data, claimed_type))


def token(user_id: int, conversation_id: int, value: agent.Attachment) -> str:
    """What the composer sends back to attach an uploaded file to its message."""
    payload = {"u": user_id, "c": conversation_id, "a": value.stored().model_dump(mode="json")}
    return signing.dumps(payload, salt=_SALT, compress=True)


def from_tokens(tokens: Any, user_id: int, conversation_id: int) -> tuple[agent.Attachment, ...]:
    """The values a send frame's tokens name, or Refused with one line."""
    if tokens is None:
        return ()
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise Refused("attachments must be a list of the tokens the upload answered.")
    check_count(len(tokens))
    values = []
    for item in tokens:
        try:
            payload = signing.loads(item, salt=_SALT, max_age=TOKEN_MAX_AGE)
        except signing.SignatureExpired:
            raise Refused("An attached file waited more than a day; attach it again.") from None
        except signing.BadSignature:
            raise Refused("An attachment token is not one this site gave.") from None
        if payload.get("u") != user_id or payload.get("c") != conversation_id:
            raise Refused("An attachment was uploaded to another conversation.")
        try:
            value = agent.Attachment.model_validate(payload["a"])
        except (KeyError, ValidationError):
            raise Refused("An attachment token is not one this site gave.") from None
        if not default_storage.exists(path(value.sha256)):
            raise Refused(f"{value.name} is no longer stored; attach it again.")
        values.append(value)
    return tuple(values)


def loaded(value: agent.Attachment) -> agent.Attachment:
    """The value with what the model reads of it; a file gone from storage says so."""
    if value.content is not None:
        return value
    try:
        if value.kind == "pdf":
            content = _read(path(value.sha256, ".txt")).decode("utf-8", "replace")
        elif value.kind == "image":
            data = base64.b64encode(_read(path(value.sha256))).decode()
            content = f"data:{value.content_type};base64,{data}"
        else:
            content = _read(path(value.sha256)).decode("utf-8-sig", "replace")
    except OSError:
        return value.model_copy(update={"kind": "text", "content": "(no longer stored)"})
    return value.model_copy(update={"content": content})


def with_contents(messages: Iterable[agent.ChatMessage]) -> list[agent.ChatMessage]:
    """`messages` with their attachments loaded, as a request sends them."""
    return [
        m.model_copy(update={"attachments": tuple(loaded(a) for a in m.attachments)})
        if m.attachments
        else m
        for m in messages
    ]


def request_with_contents(request: agent.DebugRunRequest) -> agent.DebugRunRequest:
    """A run's request with every attachment of its history and new message loaded."""
    if not request.attachments and not any(m.attachments for m in request.history):
        return request
    return request.model_copy(
        update={
            "history": tuple(with_contents(request.history)),
            "attachments": tuple(loaded(a) for a in request.attachments),
        }
    )


def _read(name: str) -> bytes:
    with default_storage.open(name, "rb") as handle:
        data: bytes = handle.read()
    return data


def open_file(value: agent.Attachment) -> Any:
    """The stored file for reading (a download, an export)."""
    return default_storage.open(path(value.sha256), "rb")


def read_bytes(value: agent.Attachment) -> bytes:
    return _read(path(value.sha256))


def stored_values(data: Sequence[Any]) -> tuple[agent.Attachment, ...]:
    """A row's attachments as values."""
    return tuple(agent.Attachment.model_validate(item) for item in data or ())


_SHA256 = re.compile(r"\b[0-9a-f]{64}\b")


def referenced() -> set[str]:
    """The sha256 of every file a message or a case carries. A case's messages are read as
    text: any sha256 in them keeps its file (a file wrongly kept costs bytes, one wrongly
    removed costs a case)."""
    from chat.models import Case, Message

    found: set[str] = set()
    for values in Message.objects.exclude(attachments=[]).values_list("attachments", flat=True):
        found.update(str(item.get("sha256")) for item in values or () if isinstance(item, dict))
    for messages in Case.objects.values_list("messages", flat=True).iterator():
        found.update(_SHA256.findall(json.dumps(messages)))
    return found


def unsent(before: datetime) -> list[tuple[str, int]]:
    """Stored files (with their sizes) that no message or case carries and that were stored
    before `before`: uploads nobody sent, whose tokens have expired."""
    if not default_storage.exists(PREFIX):
        return []
    kept = referenced()
    found = []
    for folder in default_storage.listdir(PREFIX)[0]:
        for name in default_storage.listdir(f"{PREFIX}/{folder}")[1]:
            stored = f"{PREFIX}/{folder}/{name}"
            if name.split(".")[0] in kept or default_storage.get_modified_time(stored) >= before:
                continue
            found.append((stored, default_storage.size(stored)))
    return found


def remove(names: Iterable[str]) -> None:
    for name in names:
        default_storage.delete(name)
