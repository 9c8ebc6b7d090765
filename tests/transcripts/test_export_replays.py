"""export_transcripts and evaluation replays: left out unless asked for, and every line says
what made its conversation (`purpose`), in both formats; import_transcripts reads it back."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from chat.evals import replay
from chat.models import Conversation, Purpose
from chat.testing import evals as made_for
from chat.testing import factories as make
from chat.testing.openai_script import validate_request

pytestmark = pytest.mark.django_db(transaction=True)  # the replays' runs write from a thread


def run(command: str, *args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(command, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def export(*args: str) -> tuple[list[dict[str, Any]], str]:
    out, err = run("export_transcripts", *args)
    return [json.loads(line) for line in out.splitlines()], err


@pytest.fixture
def alice() -> User:
    """Two chats of alice's and the two replays of her evaluation of a case kept from one."""
    owner = make.user("alice")
    case = made_for.search_case(owner)
    make.run_turn(make.conversation(owner, "Another chat"), "what time is it?")
    replay.evaluate([case], replay.target(), user=owner, case_set=case.case_set, repeat=2)
    assert Conversation.objects.chats().count() == 2
    assert Conversation.objects.filter(purpose=Purpose.EVAL).count() == 2
    return owner


@pytest.mark.parametrize("format", ["openai", "full"])
def test_replays_are_left_out_and_the_summary_says_how_many(alice: User, format: str) -> None:
    records, err = export("--user", "alice", "--format", format)

    assert len(records) == 2
    assert [record["purpose"] for record in records] == ["chat", "chat"]
    assert (
        f"Exported 2 conversation(s) ({format} format); 2 evaluation replay(s) left out "
        "(--include-replays exports them)." in err
    )


@pytest.mark.parametrize("format", ["openai", "full"])
def test_include_replays_exports_them_each_marked(alice: User, format: str) -> None:
    records, err = export("--user", "alice", "--format", format, "--include-replays")

    assert sorted(record["purpose"] for record in records) == ["chat", "chat", "eval", "eval"]
    assert f"Exported 4 conversation(s) ({format} format)." in err
    if format == "openai":
        for record in records:
            body = {key: value for key, value in record.items() if key != "purpose"}
            assert validate_request({"model": "m", **body}) is None


def test_every_version_line_says_its_purpose(alice: User) -> None:
    records, _ = export("--all-versions", "--include-replays")

    assert records and all(record["purpose"] in ("chat", "eval") for record in records)


def test_a_replay_asked_for_by_id_needs_the_flag(alice: User) -> None:
    made = Conversation.objects.filter(purpose=Purpose.EVAL).first()
    assert made is not None

    with pytest.raises(CommandError) as refused:
        run("export_transcripts", "--conversation", str(made.pk))
    assert str(refused.value) == (
        f"Conversation {made.pk} is an evaluation replay: add --include-replays to export it."
    )

    (record,), _ = export("--conversation", str(made.pk), "--include-replays")
    assert record["purpose"] == "eval"


def test_full_lines_import_with_their_purpose_and_openai_lines_still_read(
    alice: User, tmp_path: Path
) -> None:
    full, openai = tmp_path / "full.jsonl", tmp_path / "openai.jsonl"
    run("export_transcripts", "--format", "full", "--include-replays", "--output", str(full))
    run("export_transcripts", "--include-replays", "--output", str(openai))
    before = set(Conversation.objects.values_list("pk", flat=True))

    out, _ = run("import_transcripts", str(full))

    assert "Imported 4 conversation(s)" in out
    copies = Conversation.objects.exclude(pk__in=before)
    assert sorted(copies.values_list("purpose", flat=True)) == ["chat", "chat", "eval", "eval"]
    exported = [json.loads(line) for line in full.read_text().splitlines()]
    again, _ = export("--format", "full", "--include-replays")
    copied = [r for r in again if r["id"] in set(copies.values_list("pk", flat=True))]
    assert [{**r, "id": None} for r in copied] == [{**r, "id": None} for r in exported]

    out, _ = run("import_transcripts", str(openai), "--user", "alice")
    assert "Imported 4 conversation(s)" in out


def test_a_full_line_from_before_purposes_imports_as_a_chat(alice: User, tmp_path: Path) -> None:
    records, _ = export("--format", "full")
    older = tmp_path / "older.jsonl"
    older.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "purpose"}) + "\n" for r in records)
    )
    before = set(Conversation.objects.values_list("pk", flat=True))

    out, _ = run("import_transcripts", str(older))

    assert "Imported 2 conversation(s)" in out
    copies = Conversation.objects.exclude(pk__in=before)
    assert set(copies.values_list("purpose", flat=True)) == {"chat"}
