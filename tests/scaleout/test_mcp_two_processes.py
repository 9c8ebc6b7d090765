"""One stdio MCP server configuration used by two daphne processes: each process starts its own
server for its runs, and stopping a process stops the server it started."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from chat.testing.mcp_server import STDIO_COMMAND
from chat.testing.openai_script import MODEL, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.testing.site import Site
from chat.testing.sockets import DONE
from tests.scaleout.test_two_processes import frames_until, send, socket

pytestmark = pytest.mark.scaleout

_SETUP = """
import asyncio, json
from django.contrib.auth import get_user_model
from django.test import Client
from chat.agent import mcp
from chat.models import Conversation, McpServer, ProviderProfile
from chat.runs.mcp import save_tools, server_config
command, *args = {command!r}
server = McpServer.objects.create(name="local", transport="stdio", command=command, args=args)
_, tools = asyncio.run(mcp.probe(server_config(server)))
save_tools(server.pk, tools)
profile = ProviderProfile.objects.create(
    name="fake", base_url={base_url!r}, model={model!r}, available_to_everyone=True
)
user = get_user_model().objects.create_user("mcp", password=None)
client = Client()
client.force_login(user)
# A title of the user's own: no title request takes a response scripted for a run.
# The tool runs without asking: this test is about processes, not approvals.
parameters = {{"enabled_tools": ["local__pid"], "tool_policies": {{"local__pid": "run"}}}}
ids = [
    Conversation.objects.create(
        owner=user, profile=profile, title="Which process", parameters=parameters
    ).pk
    for _ in range(2)
]
print(json.dumps([client.cookies["sessionid"].value, ids]))
"""


def stdio_servers() -> dict[int, int]:
    """pid -> parent pid of every live process running this project's MCP server over stdio."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        words = [word.decode(errors="replace") for word in argv if word]
        state, parent = stat.rsplit(")", 1)[1].split()[:2]
        if words[1:] == list(STDIO_COMMAND[1:]) and state != "Z":
            found[int(entry.name)] = int(parent)
    return found


def test_each_process_starts_and_stops_its_own_stdio_server(site: Site) -> None:
    with FakeOpenAIServer() as fake:
        script = _SETUP.format(command=list(STDIO_COMMAND), base_url=fake.base_url, model=MODEL)
        session, (first, second) = json.loads(site.manage("shell", stdin=script).splitlines()[-1])
        fake.enqueue(
            tool_turn([("c1", "local__pid", "{}")]),
            text_turn("The first process answered."),
            tool_turn([("c2", "local__pid", "{}")]),
            text_turn("The second process answered."),
        )
        before = stdio_servers()

        async def scenario() -> tuple[dict[int, int], dict[str, int]]:
            with site.daphne() as a, site.daphne() as b:
                # One run after the other: the fake provider answers its requests in order.
                async with socket(a, session, first) as on_a:
                    await send(on_a, "Which process is the server?")
                    await frames_until(on_a, DONE, wait=30)
                async with socket(b, session, second) as on_b:
                    await send(on_b, "Which process is the server?")
                    await frames_until(on_b, DONE, wait=30)
                daphnes = {"a": a.pid, "b": b.pid}
                # Servers of these two processes only: other tests may run their own meanwhile.
                started = {
                    pid: ppid
                    for pid, ppid in stdio_servers().items()
                    if pid not in before and ppid in daphnes.values()
                }
            return started, daphnes

        started, daphnes = asyncio.run(scenario())
        assert fake.pending == 0

    runs = site.sql("select conversation_id, status from chat_run order by id")
    assert runs == [(first, "completed"), (second, "completed")]
    calls = site.sql(
        "select r.conversation_id, t.server, t.status, t.result from chat_toolcall t "
        "join chat_run r on r.id = t.run_id order by t.id"
    )
    assert [(c, s, status) for c, s, status, _ in calls] == [
        (first, "local", "completed"),
        (second, "local", "completed"),
    ]
    pids = [int(str(result)) for *_, result in calls]
    # Each process started its own server: two different ones, each a child of its process.
    assert pids[0] != pids[1]
    assert started == {pids[0]: daphnes["a"], pids[1]: daphnes["b"]}
    # Stopping the processes stopped their servers: no orphan is left.
    deadline = time.monotonic() + 10
    while set(stdio_servers()) & set(started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert set(stdio_servers()) & set(started) == set()
