"""manage.py prune removes attached files nobody sent once their day to be sent is over, and
keeps every file a message or a case carries."""

from __future__ import annotations

import json
import os
import time
from io import StringIO

import pytest
from django.core.files.storage import default_storage
from django.core.management import call_command

from chat import agent
from chat.models import Case, CaseSet
from chat.testing import factories as make
from chat.transcripts import append_messages
from chat.transcripts import attachments as stored_files

from . import files as made_files

pytestmark = pytest.mark.django_db


def prune(*args: str) -> str:
    out = StringIO()
    call_command("prune", *args, stdout=out)
    return out.getvalue().strip()


def aged(value: agent.Attachment, hours: float) -> str:
    name = stored_files.path(value.sha256)
    then = time.time() - hours * 3600
    os.utime(default_storage.path(name), (then, then))
    return name


def test_prune_removes_only_old_files_nobody_sent() -> None:
    sent = stored_files.admit_and_store("sent.png", made_files.png(), "image/png")
    in_case = stored_files.admit_and_store("case.txt", b"in a case")
    spec = stored_files.admit_and_store("spec.pdf", made_files.pdf("Draft"))
    waiting = stored_files.admit_and_store("waiting.txt", b"uploaded this morning")
    conversation = make.conversation(make.user("ada"))
    append_messages(
        conversation,
        [agent.ChatMessage(role="user", content="look", attachments=(sent,))],
    )
    case_set = CaseSet.objects.create(name="Files")
    Case.objects.create(
        case_set=case_set,
        title="Reads a file",
        messages=[{"role": "user", "content": "read", "attachments": [in_case.model_dump()]}],
        expected={"no_tool": True},
    )
    old = [aged(value, 30) for value in (sent, in_case, spec)]
    aged(waiting, 20)
    pdf_text = stored_files.path(spec.sha256, ".txt")
    os.utime(default_storage.path(pdf_text), (time.time() - 30 * 3600,) * 2)

    said = prune("--dry-run")

    assert said.splitlines()[-1].startswith("Would remove 2 attached files nobody sent (")
    assert default_storage.exists(old[2])

    said = prune("--days", "30")

    # The PDF and the text read from it, kept beside it.
    assert said.splitlines()[-1].startswith("Removed 2 attached files nobody sent (")
    assert not default_storage.exists(old[2]) and not default_storage.exists(pdf_text)
    assert default_storage.exists(old[0]) and default_storage.exists(old[1])
    assert default_storage.exists(stored_files.path(waiting.sha256))
    assert json.loads(prune("--json"))["files"] == 0


def test_a_file_uploaded_again_waits_a_day_from_the_new_upload() -> None:
    first = stored_files.admit_and_store("a.txt", b"same")
    aged(first, 30)

    stored_files.admit_and_store("b.txt", b"same")

    assert json.loads(prune("--json"))["files"] == 0
    assert default_storage.exists(stored_files.path(first.sha256))
