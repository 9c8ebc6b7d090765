"""Tests of chat.management.terminal: what the commands share."""

from __future__ import annotations

import logging
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management.base import CommandError, OutputWrapper

from chat import agent
from chat.agent import events
from chat.management.terminal import (
    Progress,
    RetryProgress,
    RunPrinter,
    fold,
    footer,
    parse_since,
    plural,
    run_summary,
    table,
    user_named,
)
from chat.models import Run, ToolCall
from chat.testing import factories as make


def test_parse_since_reads_dates_and_datetimes() -> None:
    assert parse_since("2025-03-01").isoformat() == "2025-03-01T00:00:00+00:00"
    assert parse_since("2025-03-01T10:00:00+02:00").utcoffset() is not None
    with pytest.raises(CommandError, match="YYYY-MM-DD"):
        parse_since("03/01/2025")


@pytest.mark.django_db
def test_user_named_finds_creates_or_says_who_is_missing() -> None:
    ada = User.objects.create_user("ada")
    assert user_named("ada") == ada
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        user_named("nobody")
    cli = user_named("cli", create=True)
    assert cli.pk and not cli.has_usable_password()
    assert user_named("cli", create=True) == cli


def test_fold_keeps_short_text_and_says_how_long_long_text_was() -> None:
    assert fold("a  b\nc") == "a b c"
    assert fold("x" * 400, limit=10) == "xxxxxxxxxx… (400 characters)"


@pytest.mark.django_db
def test_footer_and_summary_of_a_run() -> None:
    made = make.conversation(make.user(), "cli")
    run = Run.objects.create(
        conversation=made, status="completed", model="m", prompt_tokens=3, completion_tokens=4,
        total_tokens=7, steps=2, duration=1.5,
    )  # fmt: skip
    ToolCall.objects.create(run=run, call_id="c1", name="search_cards", status="completed")
    assert footer(run, "m") == (
        f"[m · run {run.pk} completed · conversation {made.pk} · 3 prompt + 4 completion tokens"
        " · 2 step(s) · 1.50s]"
    )
    summary = run_summary(run)
    assert summary["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    assert [call["name"] for call in summary["tool_calls"]] == ["search_cards"]


async def test_the_printer_streams_text_and_tool_calls() -> None:
    out, err = StringIO(), StringIO()
    printer = RunPrinter(OutputWrapper(out), OutputWrapper(err))
    call = agent.ToolCall(id="c1", name="search_cards", arguments='{"query": "pills"}')
    run = Run()
    for event in (
        events.TextDelta("Hel"),
        events.TextDelta("lo"),
        events.ToolCallStarted(call),
        events.ToolCallFinished(
            events.ToolResult(tool_call=call, content="found 2", status="completed", duration=0.25)
        ),
        events.ModelCallFailed(step=1, message="HTTP 500: down"),
    ):
        await printer(run, event)
    assert out.getvalue() == (
        'Hello→ Search cards {"query": "pills"}\n✓ Search cards (0.25s): found 2\n\n'
    )
    # The reason is the command's last line (its CommandError), not said here too.
    assert err.getvalue() == ""


def test_progress_draws_only_when_enabled_and_ends_its_line() -> None:
    stream = StringIO()
    progress = Progress(OutputWrapper(stream), total=2, enabled=True, verb="Checking")
    progress.advance()
    progress.advance()
    progress.close()
    assert "Checking [" in stream.getvalue() and "2/2 conversations" in stream.getvalue()
    assert stream.getvalue().endswith("\n")
    quiet = StringIO()
    Progress(OutputWrapper(quiet), total=2, enabled=False).advance()
    assert quiet.getvalue() == ""


def test_table_pads_every_column_but_the_last() -> None:
    lines = table([("ID", "TITLE", "FROM"), ("12", "Pills", "conversation 3"), ("7", "A", "")])
    assert lines == ["ID  TITLE  FROM", "12  Pills  conversation 3", "7   A"]
    assert table([]) == []
    assert (plural(1, "case"), plural(0, "case"), plural(3, "line")) == (
        "1 case",
        "0 cases",
        "3 lines",
    )


def test_a_retry_line_ends_the_progress_bar_first() -> None:
    stream = StringIO()
    err = OutputWrapper(stream)
    progress = Progress(err, total=2, enabled=True, verb="Evaluating", things="attempts")
    progress.advance()
    record = logging.LogRecord("chat.agent.clients", logging.WARNING, "", 0, "retry", (), None)
    record.retry = (1, 2, 0.5)
    assert RetryProgress(err, progress).filter(record) is False
    assert stream.getvalue().endswith("1/2 attempts\n… retrying (1 of 2) in 0.5 s\n")
