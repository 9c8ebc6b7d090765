"""Migration 0018: model calls written before it are converted, one conversation at a time in
chunks, into chained deltas with a sha256, and every body rebuilds byte for byte."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from chat.agent.wire import encode_body, payload_sha256
from chat.models import ModelCall

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("chat", "0017_approval_records")]
TOOLS = [{"type": "function", "function": {"name": "get_current_time", "parameters": {}}}]


def history(turns: int) -> list[dict[str, Any]]:
    return [
        message
        for turn in range(turns)
        for message in (
            {"role": "user", "content": f"question {turn} — ünïcode"},
            {"role": "assistant", "content": f"answer {turn}"},
        )
    ]


BODIES = [
    [
        {"model": "m", "messages": history(1), "stream": True, "tools": TOOLS},
        {"model": "m", "messages": history(2), "stream": True, "tools": TOOLS},
        {"messages": history(3), "model": "m", "temperature": 1.0, "tools": TOOLS},
        ["not", "an", "object"],
        {"model": "m", "messages": history(4), "stream": True, "tools": TOOLS},
        {"model": "m", "messages": history(5)[:3], "stream": True},
        {"model": "m", "messages": history(6), "stream": True, "temperature": 1},
    ],
    [{}],
]


def migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_existing_rows_are_chained_and_rebuild_byte_for_byte(monkeypatch: Any) -> None:
    module = importlib.import_module("chat.migrations.0018_model_call_storage")
    monkeypatch.setattr(module, "CHUNK", 2)  # chunk and conversation boundaries meet
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    old = migrate(BEFORE)
    owner = old.get_model("auth", "User").objects.create(username="old")
    made: list[tuple[Any, Any, str]] = []
    for bodies in BODIES:
        conversation = old.get_model("chat", "Conversation").objects.create(owner=owner)
        runs = [
            old.get_model("chat", "Run").objects.create(
                conversation=conversation, status="completed"
            )
            for _ in range(2)
        ]
        for step, sent in enumerate(bodies):
            raw = f'{step}.5\tdata: {{"n": {step}, "text": "é\\tx"}}\n{step + 1}\tdata: [DONE]'
            row = old.get_model("chat", "ModelCall").objects.create(
                run=runs[step * 2 // len(bodies)],
                step=step,
                request=sent,
                raw_stream=raw if step % 3 else "",
            )
            row.refresh_from_db()  # as stored: PostgreSQL's jsonb has its own key order
            made.append((row.pk, row.request, raw if step % 3 else ""))

    migrate(latest)
    calls = {call.pk: call for call in ModelCall.objects.all()}
    for pk, sent, raw in made:
        call = ModelCall.objects.get(pk=pk)  # each alone: its chain read at once
        assert encode_body(call.request) == encode_body(sent)
        assert call.request_sha256 == payload_sha256(encode_body(sent))
        assert call.raw_stream == raw
        assert encode_body(calls[pk].request) == encode_body(sent)  # all in one pass
    first = [pk for pk, _, _ in made[: len(BODIES[0])]]
    bases = [calls[pk].request_base_id for pk in first]
    assert bases == [None, first[0], first[1], None, None, first[4], first[5]]
    assert len(calls[first[1]].request_delta) < len(encode_body(made[1][1])) / 2

    migrate(BEFORE)  # and back: whole bodies and plain streams again
    old = MigrationExecutor(connection).loader.project_state(BEFORE).apps
    rows = old.get_model("chat", "ModelCall").objects.order_by("pk")
    assert [(row.pk, row.request, row.raw_stream) for row in rows] == made
    migrate(latest)
