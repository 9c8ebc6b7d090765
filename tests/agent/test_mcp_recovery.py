"""MCP connections recover as real servers need, against the real test server (stdio and
streamable HTTP): a stdio server that dies while idle, an HTTP server restarted (it answers the
forgotten session with 400 or 404), a start during the pause between attempts. A server's
JSON-RPC error, a sampling or an elicitation request is the tool's failure, not the server's
absence; a stdio server's stderr shows on ours, named."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from chat.agent import mcp, mcp_content
from chat.agent.mcp_session import NO_ELICITATION, NO_SAMPLING
from chat.models import ToolCall
from chat.runs import mcp as hub_module
from chat.testing.mcp_server import STDIO_COMMAND, McpHttpServer
from chat.testing.openai_script import text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.runs.test_mcp import conversation, run, stdio_server, tool_message

Open = Callable[[mcp.ServerConfig], mcp.Connection]


@pytest.fixture
async def opened() -> AsyncIterator[Open]:
    """Connections made by the test, closed after it (and so their stdio servers stopped)."""
    made: list[mcp.Connection] = []

    def connect(config: mcp.ServerConfig) -> mcp.Connection:
        made.append(mcp.Connection(config))
        return made[-1]

    yield connect
    await asyncio.gather(*(connection.close() for connection in made))


def stdio(name: str = "local", *options: str) -> mcp.ServerConfig:
    command, *args = STDIO_COMMAND
    return mcp.ServerConfig(name=name, command=command, args=(*args, *options))


async def server_pid(connection: mcp.Connection) -> int:
    return int(mcp_content.result_text(await connection.call("pid", {})))


async def test_a_stdio_server_dead_while_idle_is_noticed_at_once_and_the_next_call_answered(
    opened: Open,
) -> None:
    connection = opened(stdio())
    first = await server_pid(connection)

    os.kill(first, signal.SIGKILL)
    killed = time.monotonic()
    while connection.up:  # the closed pipe says so, long before the next ping
        assert time.monotonic() - killed < mcp.PING_EVERY / 5
        await asyncio.sleep(0.005)
    second = await server_pid(connection)  # sent to the restarted server, not lost

    assert second != first
    assert connection.error == ""


async def test_a_call_sent_as_the_stdio_server_dies_reads_stopped_and_the_next_is_answered(
    opened: Open,
) -> None:
    connection = opened(stdio())
    first = await server_pid(connection)

    with pytest.raises(mcp.McpUnavailable, match=r"^the server stopped during the call$"):
        await connection.call("crash", {})

    assert await server_pid(connection) != first


@pytest.mark.parametrize("unknown_session", [400, 404])
async def test_a_restarted_http_server_gets_a_new_session_and_the_call_goes_through(
    opened: Open, unknown_session: int
) -> None:
    first = McpHttpServer("docs", unknown_session=unknown_session).start()
    try:
        connection = opened(mcp.ServerConfig(name="docs", url=first.url))
        before = await server_pid(connection)
    finally:
        first.stop()
    with McpHttpServer("docs", port=first.port, unknown_session=unknown_session):
        after = await server_pid(connection)
        assert await server_pid(connection) == after  # the new session stays

    assert after != before


async def test_a_start_during_the_pause_between_attempts_tries_at_once(
    opened: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp, "RETRY_WAITS", (30.0,))
    first = McpHttpServer("docs").start()
    try:
        connection = opened(mcp.ServerConfig(name="docs", url=first.url))
        await connection.start()
    finally:
        first.stop()
    with pytest.raises(mcp.McpUnavailable):
        await connection.call("pid", {})
    with pytest.raises(mcp.McpUnavailable):  # tried again now, and waiting 30 s from here
        await connection.start()

    with McpHttpServer("docs", port=first.port):
        asked = time.monotonic()
        await connection.start()
        assert time.monotonic() - asked < 5
        assert await server_pid(connection)


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("summarise", {"text": "the deploy notes"}, NO_SAMPLING),
        ("confirm", {"question": "Deploy now?"}, NO_ELICITATION),
        ("research_task", {"topic": "flaky tests"}, "research_task runs only as a task"),
    ],
)
async def test_a_json_rpc_error_answer_is_the_tools_failure(
    opened: Open, tool: str, arguments: dict[str, str], message: str
) -> None:
    connection = opened(stdio())

    with pytest.raises(mcp.McpCallFailed) as failed:
        await connection.call(tool, arguments)

    assert str(failed.value).startswith(message)
    assert connection.up  # the server is fine
    assert await server_pid(connection)


@pytest.mark.django_db(transaction=True)
async def test_a_run_reads_refused_sampling_elicitation_and_a_task_only_tool_as_tool_errors(
    hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    await hub.refresh(await stdio_server("local"))
    made = await conversation("local__summarise", "local__confirm")
    made.parameters["tool_policies"] = {"local__summarise": "run", "local__confirm": "run"}
    await made.asave(update_fields=["parameters"])
    fake_openai.enqueue(
        tool_turn(
            [
                ("c1", "local__summarise", '{"text": "the deploy notes"}'),
                ("c2", "local__confirm", '{"question": "Deploy now?"}'),
            ]
        ),
        text_turn("Neither works here."),
    )

    finished = await run(made, fake_openai)

    assert finished.status == "completed"
    calls = {c.call_id: c async for c in ToolCall.objects.filter(run=finished)}
    assert (calls["c1"].failure, calls["c1"].error) == ("tool_error", NO_SAMPLING)
    assert (calls["c2"].failure, calls["c2"].error) == ("tool_error", NO_ELICITATION)
    assert NO_SAMPLING in tool_message(fake_openai, 1, "c1")
    assert "unavailable" not in tool_message(fake_openai, 1, "c2")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts this process's fds")
async def test_a_stdio_servers_stderr_shows_on_ours_named_and_leaves_no_fd_open(
    opened: Open, capfd: pytest.CaptureFixture[str]
) -> None:
    before = open_fds()
    connection = opened(stdio("local", "--stderr-line", "index warming up ☕"))
    await connection.start()
    seen = ""
    for _ in range(100):
        seen += capfd.readouterr().err
        if "index warming up" in seen:
            break
        await asyncio.sleep(0.05)

    assert "mcp local: index warming up ☕\n" in seen
    await connection.close()
    for _ in range(100):  # the copying thread ends as the server's end closes
        if open_fds() <= before:
            break
        await asyncio.sleep(0.05)
    assert open_fds() <= before
