"""The embedded default under load: SQLite (WAL, busy timeout) shared by several processes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import pytest
import websockets
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from chat import runs
from chat.agent import history
from chat.models import Conversation, Run
from chat.testing.processes import ROOT, DaphneServer
from chat.transcripts import load_history

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
RUNS = 20


def test_twenty_simultaneous_runs_and_a_second_writer_process() -> None:
    user = get_user_model().objects.create_user("ada", password="pw-123456789")
    client = Client()
    client.force_login(user)
    session = client.cookies["sessionid"].value
    conversations = []
    for _ in range(RUNS):
        conversation = Conversation(owner=user)
        parameters = runs.default_parameters().changed(tool_policies={"handoff_note": "run"})
        conversation.set_agent_parameters(parameters)
        conversation.save()
        conversations.append(conversation.pk)
    database_url = f"sqlite:///{connection.settings_dict['NAME']}"

    async def one(server: DaphneServer, pk: int) -> str:
        url = f"ws://127.0.0.1:{server.port}/ws/conversations/{pk}/"
        headers = {"Cookie": f"sessionid={session}"}
        async with websockets.connect(url, origin=server.url, additional_headers=headers) as ws:
            await ws.send(json.dumps({"action": "send", "message": "time and a handoff note"}))
            async with asyncio.timeout(60):
                while True:
                    frame = str(await ws.recv())
                    if 'data-running="false"' in frame:
                        return frame

    async def scenario(server: DaphneServer) -> list[Any]:
        return await asyncio.gather(*(one(server, pk) for pk in conversations))

    env = {**os.environ, "DATABASE_URL": database_url, "AGENTLAB_SCRIPTED_DELAY": "0.001"}
    with DaphneServer(
        database_url=database_url, env={"AGENTLAB_SCRIPTED_DELAY": "0.001"}
    ) as server:
        writer = subprocess.Popen(
            [sys.executable, "manage.py", "chat", "what time is it?", "--all-tools", "--json"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        finals = asyncio.run(scenario(server))
        out, err = writer.communicate(timeout=60)
        log = server.log.read_text()

    assert writer.returncode == 0, err
    assert json.loads(out)["status"] == "completed"
    assert all("Handoff note" in final for final in finals)
    assert "database is locked" not in log and "Traceback" not in log
    assert Run.objects.count() == RUNS + 1
    assert set(Run.objects.values_list("status", flat=True)) == {"completed"}
    for conversation in Conversation.objects.filter(pk__in=conversations):
        messages = load_history(conversation)
        assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
        assert history.validate(messages) == []
