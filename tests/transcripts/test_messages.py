"""The one reader of an OpenAI-shaped message (chat/transcripts/messages.py): a case line and a
transcript line read the same message the same way, through their real commands."""

from __future__ import annotations

import json
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from chat.models import Case, CaseSet, Conversation
from chat.testing import factories as make

pytestmark = pytest.mark.django_db

Reader = Callable[[dict[str, Any]], str]
"""Imports one line whose history is this message; returns the content stored, or the one
line that refused it (nothing stored)."""

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


def imported(line: dict[str, Any], tmp_path: Path, *command: str) -> str:
    """The line imported by `command`: "" when it was, its one line on stderr when it was not."""
    path = tmp_path / "line.jsonl"
    path.write_text(json.dumps(line) + "\n")
    err = StringIO()
    try:
        call_command(*command[:-1], str(path), command[-1], stdout=StringIO(), stderr=err)
    except CommandError as exc:
        assert "\n" not in str(exc)
        (refusal,) = err.getvalue().splitlines()
        return refusal
    return ""


def as_case(tmp_path: Path) -> Reader:
    def read(message: dict[str, Any]) -> str:
        line = {"set": "s", "title": "t", "messages": [message], "expected": {"no_tool": True}}
        refusal = imported(line, tmp_path, "cases", "import", "--user=carol")
        if refusal:
            assert not Case.objects.exists() and not CaseSet.objects.exists()
            return refusal
        return str(Case.objects.get().messages[0]["content"])

    return read


def as_transcript(tmp_path: Path) -> Reader:
    def read(message: dict[str, Any]) -> str:
        refusal = imported({"messages": [message]}, tmp_path, "import_transcripts", "--user=carol")
        if refusal:
            assert not Conversation.objects.exists()
            return refusal
        return str(Conversation.objects.get().messages.get().content)

    return read


@pytest.fixture(params=[as_case, as_transcript], ids=["case line", "transcript line"])
def read(request: pytest.FixtureRequest, tmp_path: Path) -> Reader:
    make.user("carol")
    reader: Reader = request.param(tmp_path)
    return reader


def test_text_parts_are_joined_with_a_blank_line(read: Reader) -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert read({"role": "user", "content": parts}) == "a\n\nb"


def test_an_image_part_that_is_no_image_is_refused_by_the_gate(read: Reader) -> None:
    refusal = read({"role": "user", "content": [{"type": "text", "text": "look"}, IMAGE]})
    assert refusal == (
        "line 1: messages.0: parts.0: image-1.png says it is an image, but its content is not "
        "one models take."
    )


def test_nan_is_refused_not_turned_into_null(read: Reader) -> None:
    refusal = read({"role": "user", "content": "hi", "reasoning": float("nan")})
    assert refusal == "line 1: not JSON: NaN is not a JSON number"


def test_a_refusal_or_legacy_function_call_is_refused(read: Reader) -> None:
    refusal = read({"role": "user", "content": "hi", "refusal": "no"})
    assert refusal == "line 1: messages.0: refusal is not supported: the core keeps no refusal"


def test_a_user_message_past_the_webs_limit_is_refused(read: Reader, settings: Any) -> None:
    settings.AGENTLAB_MAX_MESSAGE_CHARS = 10
    refusal = read({"role": "user", "content": "x" * 11})
    assert refusal == (
        "line 1: messages.0: content: the user message is 11 characters, more than the 10 the "
        "web accepts"
    )
