"""Attached files in export_transcripts and back through import_transcripts
(chat/transcripts/inline.py): the full format carries the bytes, the openai format the parts a
run sent, and both come back through the file gate into a fresh storage."""

from __future__ import annotations

import asyncio
import base64
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import LazySettings
from django.core.files.storage import default_storage
from django.core.management import call_command

from chat import agent, runs, transcripts
from chat.models import Conversation, Message, ModelCall
from chat.models.request_store import body_of
from chat.testing import factories as make
from chat.testing.approvals import on_provider
from chat.testing.openai_script import text_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.transcripts import attachments, export
from tests.attachments import files as made

pytestmark = pytest.mark.django_db

QUESTION = "What is in these?"
CSV = b"region,total\nnorth,12\n"


def run(command: str, *args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(command, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def attached() -> list[agent.Attachment]:
    return [
        attachments.admit_and_store("chart.png", made.png(), "image/png"),
        attachments.admit_and_store("notes.csv", CSV, "text/csv"),
        attachments.admit_and_store("spec.pdf", made.pdf("Ship it", "Then rest"), ""),
    ]


def with_files(owner: Any) -> Conversation:
    conversation = make.conversation(owner, "files")
    transcripts.append_messages(
        conversation,
        [
            agent.ChatMessage(role="user", content=QUESTION, attachments=tuple(attached())),
            agent.ChatMessage(role="assistant", content="A chart, a table and a spec."),
        ],
    )
    return conversation


def fresh_media(settings: LazySettings, tmp_path: Path, name: str) -> Path:
    """Another, empty storage: what a second site would have."""
    root = tmp_path / name
    root.mkdir()
    settings.MEDIA_ROOT = root
    return root


def test_a_full_line_carries_each_file_inline(tmp_path: Path) -> None:
    values = with_files(make.user("ada")).messages.get(index=0).attachments
    out, _ = run("export_transcripts", "--format", "full")
    (user, reply) = json.loads(out)["messages"]
    assert "attachments" not in reply
    assert [a["name"] for a in user["attachments"]] == ["chart.png", "notes.csv", "spec.pdf"]
    for line, value in zip(user["attachments"], values, strict=True):
        stored = agent.Attachment.model_validate(value)
        assert line == {
            **stored.model_dump(mode="json", exclude={"content"}),
            "data": base64.b64encode(attachments.read_bytes(stored)).decode(),
        }


def test_full_export_then_import_into_a_fresh_site_keeps_every_file(
    tmp_path: Path, settings: LazySettings
) -> None:
    original = with_files(make.user("ada"))
    before = {
        a["sha256"]: attachments.read_bytes(agent.Attachment.model_validate(a))
        for a in original.messages.get(index=0).attachments
    }
    values = original.messages.get(index=0).attachments
    path = tmp_path / "full.jsonl"
    run("export_transcripts", "--format", "full", "--output", str(path))
    first = json.loads(path.read_text())
    Conversation.objects.all().delete()
    root = fresh_media(settings, tmp_path, "elsewhere")

    run("import_transcripts", str(path))

    row = Message.objects.get(index=0)
    assert row.attachments == values
    for value in attachments.stored_values(row.attachments):
        assert attachments.read_bytes(value) == before[value.sha256]
    assert (root / "attachments").is_dir()
    again, _ = run("export_transcripts", "--format", "full")
    assert {**json.loads(again), "id": None} == {**first, "id": None}


def test_a_file_gone_from_storage_is_said_and_the_rest_exports(tmp_path: Path) -> None:
    conversation = with_files(make.user("ada"))
    gone = agent.Attachment.model_validate(conversation.messages.get(index=0).attachments[1])
    default_storage.delete(attachments.path(gone.sha256))

    out, err = run("export_transcripts", "--format", "full")

    files = json.loads(out)["messages"][0]["attachments"]
    stored = gone.model_dump(mode="json", exclude={"content"})
    assert files[1] == {**stored, "data": None, "missing": True}
    assert files[0]["data"] and files[2]["data"]
    path = tmp_path / "full.jsonl"
    path.write_text(out)
    Conversation.objects.all().delete()
    _, err = run("import_transcripts", str(path))
    assert "line 1: warning: message 0: notes.csv was not in the export (missing): left out" in err
    kept = Message.objects.get(index=0).attachments
    assert [a["name"] for a in kept] == ["chart.png", "spec.pdf"]


def test_an_openai_line_holds_the_parts_as_sent(settings: LazySettings) -> None:
    conversation = with_files(make.user("ada"))
    out, _ = run("export_transcripts")
    user = json.loads(out)["messages"][0]
    history = transcripts.load_history(conversation)
    assert user == attachments.with_contents(history)[0].to_openai()
    assert [part["type"] for part in user["content"]] == ["text", "image_url", "text", "text"]
    assert user["content"][1]["image_url"]["url"] == (
        f"data:image/png;base64,{base64.b64encode(made.png()).decode()}"
    )
    assert user["content"][2]["text"] == f"Attached file notes.csv (text/csv):\n\n{CSV.decode()}"
    assert user["content"][3]["text"].startswith(
        "Attached file spec.pdf (PDF, 2 pages, as text):\n\n[Page 1]\nShip it"
    )


@pytest.mark.django_db(transaction=True)
def test_the_openai_line_is_byte_for_byte_what_the_run_sent(
    fake_openai: FakeOpenAIServer,
) -> None:
    conversation = on_provider(fake_openai, make.user("ada"))
    fake_openai.enqueue(text_turn("A chart, a table and a spec."))

    async def send() -> Any:
        handle = await runs.start_run(
            conversation=conversation,
            user=conversation.owner,
            content=QUESTION,
            attachments=attached(),
        )
        return await handle.task

    finished = asyncio.run(send())
    assert finished.status == "completed", finished.error

    out, _ = run("export_transcripts")
    line = json.loads(out)
    (request,) = fake_openai.requests
    sent = request.body["messages"]
    assert line["messages"][: len(sent)] == sent
    recorded = body_of(ModelCall.objects.get(run=finished))
    assert json.dumps(recorded["messages"]) == json.dumps(sent)


def test_the_openai_export_reads_one_message_s_files_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    owner = make.user("ada")
    conversation = make.conversation(owner, "two questions")
    chart, notes = attached()[:2]
    transcripts.append_messages(
        conversation,
        [
            agent.ChatMessage(role="user", content="one", attachments=(chart,)),
            agent.ChatMessage(role="assistant", content="a"),
            agent.ChatMessage(role="user", content="two", attachments=(notes,)),
            agent.ChatMessage(role="assistant", content="b"),
        ],
    )
    fetched = Conversation.objects.for_export(full=False).get(pk=conversation.pk)
    read: list[str] = []
    real = attachments.loaded
    monkeypatch.setattr(attachments, "loaded", lambda v: read.append(v.name) or real(v))
    pieces = export.openai_text(fetched)
    text, when_one = "", None
    for piece in pieces:
        text += piece
        if when_one is None and '"one"' in text:
            when_one = list(read)
    assert when_one == ["chart.png"]  # the second message's file is not read yet
    assert read == ["chart.png", "notes.csv"]
    assert json.loads(text) == export.openai_record(fetched)
