"""Tests of chat.runs.liveness: dead runs are interrupted and repaired, at start-up and on
demand."""

from __future__ import annotations

import logging
import socket
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import OperationalError

from chat import runs, startup, transcripts
from chat.agent import history
from chat.models import Conversation, HistoryRepair, Run, ToolCall
from chat.testing import factories as make

pytestmark = pytest.mark.django_db

DEAD_HERE = f"{socket.gethostname()}:999999999:dead"


def crashed(worker: str, *, age: float = 0) -> Run:
    """A run of a new conversation left mid tool round by `worker`, last seen `age` s ago."""
    return make.crashed_run(make.conversation(make.user("ada")), worker, age=age)


def assert_recovered(run: Run) -> None:
    run.refresh_from_db()
    assert run.status == "interrupted" and run.error == runs.INTERRUPTED
    messages = transcripts.load_history(run.conversation)
    assert history.validate(messages) == []
    assert messages[-1].tool_call_id == "c1" and "Interrupted" in (messages[-1].content or "")
    assert ToolCall.objects.get(run=run).status == "failed"


def test_command_interrupts_runs_of_dead_processes_and_leaves_live_ones() -> None:
    dead = crashed(DEAD_HERE)
    stale = crashed("other-host:1:x", age=3600)
    live = crashed("other-host:2:y")
    out = StringIO()

    call_command("recover_runs", stdout=out)

    text = out.getvalue()
    assert f"run {dead.pk} of conversation {dead.conversation_id} (worker {DEAD_HERE})" in text
    assert "added 1, removed 0 message(s)" in text
    assert f"run {stale.pk} " in text and f"run {live.pk} " not in text
    assert "Recovered 2 run(s); 1 run(s) in progress in live processes left alone." in text
    assert_recovered(dead)
    assert_recovered(stale)
    live.refresh_from_db()
    assert live.status == "in_progress"
    assert HistoryRepair.objects.filter(run=dead).count() == 1


def test_command_with_nothing_to_recover() -> None:
    out = StringIO()
    call_command("recover_runs", stdout=out)
    assert out.getvalue().strip() == "Recovered 0 run(s)."


def replay_run(worker: str) -> Run:
    """A run of an evaluation's replay, left mid tool round by `worker`."""
    run = crashed(worker)
    Conversation.objects.filter(pk=run.conversation_id).update(purpose="eval")
    return run


def test_recover_on_start_interrupts_evaluation_runs_and_leaves_chats_to_resume() -> None:
    dead = replay_run(DEAD_HERE)
    chat = crashed(DEAD_HERE)

    assert [run.pk for run in startup.recover_on_start()] == [dead.pk]
    assert startup.recover_on_start() == []
    assert_recovered(dead)
    assert HistoryRepair.objects.count() == 1
    chat.refresh_from_db()
    assert chat.status == "in_progress"  # the sweeper resumes it (chat.runs.resume)


@pytest.mark.django_db(transaction=True)
async def test_recover_on_start_inside_an_event_loop_uses_a_thread() -> None:
    from channels.db import database_sync_to_async

    dead = await database_sync_to_async(replay_run)(DEAD_HERE)

    recovered = startup.recover_on_start()

    assert [run.pk for run in recovered] == [dead.pk]
    await dead.arefresh_from_db()
    assert dead.status == "interrupted"


def test_recover_on_start_never_stops_the_server(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def missing_table(**_: object) -> list[Run]:
        raise OperationalError("no such table: chat_run")

    monkeypatch.setattr(runs, "recover_interrupted_runs", missing_table)
    with caplog.at_level(logging.WARNING, logger="chat.startup"):
        assert startup.recover_on_start() == []
    assert "the database is not ready (no such table: chat_run)" in caplog.text

    def bug(**_: object) -> list[Run]:
        raise RuntimeError("boom")

    monkeypatch.setattr(runs, "recover_interrupted_runs", bug)
    assert startup.recover_on_start() == []
    assert "RuntimeError: boom" in caplog.text
    assert Conversation.objects.count() == 0
