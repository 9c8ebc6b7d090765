"""A case keeps its moment's files (chat/evals/cases.py, records.py, replayed.py): as stored
values made from the chat, inline through `cases export` and `cases import`, and sent again by
an evaluation's replay."""

from __future__ import annotations

import base64
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import LazySettings
from django.core.management import CommandError, call_command

from chat.evals import cases, replay
from chat.models import Case, ResultVerdict
from chat.testing import factories as make
from chat.testing.openai_script import MODEL, text_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.transcripts import attachments
from tests.attachments import files as made

pytestmark = pytest.mark.django_db

CSV = b"card,colour\npills,blue\n"


def files_under(root: Any) -> list[Path]:
    return [path for path in Path(root).rglob("*") if path.is_file()]


def kept_case(owner: Any) -> Case:
    """A case made from a chat whose question carried a PNG and a CSV."""
    conversation = made.chat_with_files(
        owner,
        "Cards",
        "Which card is this?",
        "The pills card.",
        ("card.png", made.png(), "image/png"),
        ("cards.csv", CSV, "text/csv"),
    )
    return cases.save_case(conversation, 0, set_name="cards", user=owner)


def stored(case: Case) -> list[dict[str, Any]]:
    files: list[dict[str, Any]] = case.messages[-1]["attachments"]
    return files


def test_a_case_from_the_chat_keeps_the_files_as_stored_values(settings: LazySettings) -> None:
    owner = make.user("ada")
    case = kept_case(owner)
    before = files_under(settings.MEDIA_ROOT)
    question = case.messages[-1]
    assert question["content"] == "Which card is this?"
    assert [a["name"] for a in stored(case)] == ["card.png", "cards.csv"]
    assert all("content" not in a and "data" not in a for a in stored(case))
    again = cases.save_case(case.conversation, 0, set_name="more", user=owner)
    assert stored(again) == stored(case)
    assert files_under(settings.MEDIA_ROOT) == before  # content addressed: no copy


def test_cases_export_then_import_into_a_fresh_site_keeps_the_files(
    tmp_path: Path, settings: LazySettings
) -> None:
    case = kept_case(make.user("ada"))
    path = tmp_path / "cases.jsonl"
    call_command("cases", "export", "--output", str(path), stdout=StringIO(), stderr=StringIO())
    line = json.loads(path.read_text())
    inline = line["messages"][-1]["attachments"]
    assert inline[0]["data"] == base64.b64encode(made.png()).decode()
    assert base64.b64decode(inline[1]["data"]) == CSV
    Case.objects.all().delete()
    settings.MEDIA_ROOT = tmp_path / "elsewhere"

    call_command("cases", "import", str(path), stdout=StringIO(), stderr=StringIO())

    copy = Case.objects.get()
    assert stored(copy) == stored(case)
    values = attachments.stored_values(stored(copy))
    assert [attachments.read_bytes(v) for v in values] == [made.png(), CSV]
    out = StringIO()
    call_command("cases", "export", stdout=out, stderr=StringIO())
    assert json.loads(out.getvalue())["messages"] == line["messages"]


def import_line(line: dict[str, Any], tmp_path: Path) -> str:
    """ "" when `cases import` took the line, else its one refusal."""
    path = tmp_path / "case.jsonl"
    path.write_text(json.dumps(line) + "\n")
    err = StringIO()
    try:
        call_command("cases", "import", str(path), stdout=StringIO(), stderr=err)
    except CommandError:
        (refusal,) = err.getvalue().splitlines()
        return refusal
    return ""


def case_line(message: dict[str, Any]) -> dict[str, Any]:
    return {"set": "s", "title": "t", "messages": [message], "expected": {"no_tool": True}}


def test_a_case_line_in_the_openai_shape_gives_its_image_to_the_gate(tmp_path: Path) -> None:
    url = f"data:image/png;base64,{base64.b64encode(made.png()).decode()}"
    content = [{"type": "text", "text": "Which?"}, {"type": "image_url", "image_url": {"url": url}}]
    assert import_line(case_line({"role": "user", "content": content}), tmp_path) == ""
    (value,) = attachments.stored_values(stored(Case.objects.get()))
    assert (value.name, value.content_type) == ("image-1.png", "image/png")
    assert attachments.read_bytes(value) == made.png()


def test_a_case_line_with_a_bad_file_stores_nothing(tmp_path: Path, settings: LazySettings) -> None:
    settings.MEDIA_ROOT = tmp_path / "empty"
    good = {
        "name": "card.png",
        "content_type": "image/png",
        "size": 1,
        "sha256": "0" * 64,
        "kind": "image",
        "data": base64.b64encode(made.png()).decode(),
    }
    message = {"role": "user", "content": "Which?", "attachments": [good]}
    refusal = import_line(case_line(message), tmp_path)
    assert refusal.startswith(
        "line 1: messages.0: attachments.0: card.png: its sha256 (0000000000000000…) is not "
        "that of its data"
    )
    assert not Case.objects.exists() and files_under(settings.MEDIA_ROOT) == []


@pytest.mark.django_db(transaction=True)
def test_an_evaluation_sends_the_case_s_files(fake_openai: FakeOpenAIServer) -> None:
    owner = make.user("ada")
    case = kept_case(owner)
    fake_openai.enqueue(text_turn("The pills card."))

    done = replay.evaluate(
        [case], replay.target(base_url=fake_openai.base_url, model=MODEL), user=owner
    )

    (result,) = replay.results(done)
    assert result.verdict == ResultVerdict.PASSED, result.reason
    (request,) = fake_openai.requests
    sent = request.body["messages"][-1]
    png = base64.b64encode(made.png()).decode()
    assert sent == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Which card is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
            {"type": "text", "text": f"Attached file cards.csv (text/csv):\n\n{CSV.decode()}"},
        ],
    }
    replayed = result.run.conversation.messages.get(index=0)
    values = attachments.stored_values(stored(case))
    assert attachments.stored_values(replayed.attachments) == values
