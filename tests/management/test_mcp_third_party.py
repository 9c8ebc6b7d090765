"""A third-party MCP server installed from PyPI (`mcp-server-time`), as a team would add it,
driven end to end: `manage.py mcp add`, then `manage.py chat` through the strict local
provider, which calls its tools; what the model reads is the server's answer."""

from __future__ import annotations

import json
import shlex
import sys
from io import StringIO

import pytest
from django.core.management import call_command

from chat.models import McpServer, McpTool, ToolCall
from chat.testing.openai_script import text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)
TIME_SERVER = shlex.join([sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"])


def command(name: str, *args: str) -> str:
    out = StringIO()
    call_command(name, *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_mcp_server_time_from_pypi_answers_a_conversation(fake_openai: FakeOpenAIServer) -> None:
    added = command("mcp", "add", "time", "--command", TIME_SERVER)
    assert "time__get_current_time" in added and "time__convert_time" in added
    schema = McpTool.objects.get(exposed_name="time__convert_time").input_schema
    assert {"source_timezone", "time", "target_timezone"} <= set(schema["properties"])
    fake_openai.enqueue(
        tool_turn(
            [
                ("c1", "time__get_current_time", '{"timezone": "Asia/Tokyo"}'),
                (
                    "c2",
                    "time__convert_time",
                    '{"source_timezone": "Europe/Paris", "time": "09:30", '
                    '"target_timezone": "America/New_York"}',
                ),
                ("c3", "time__get_current_time", '{"timezone": "Mars/Olympus"}'),
            ]
        ),
        text_turn("It is evening in Tokyo; 09:30 in Paris is 03:30 in New York."),
    )
    base = ["--base-url", fake_openai.base_url, "--model", "m-1", "--json"]

    result = json.loads(command("chat", "What time is it in Tokyo?", "--tool", "time__*", *base))

    assert result["status"] == "completed"
    offered = {tool["function"]["name"] for tool in fake_openai.requests[0].body["tools"]}
    assert offered == {"time__get_current_time", "time__convert_time"}
    replies = {
        message["tool_call_id"]: message["content"]
        for message in fake_openai.requests[1].body["messages"]
        if message["role"] == "tool"
    }
    now = json.loads(replies["c1"])
    assert now["timezone"] == "Asia/Tokyo" and now["datetime"].endswith("+09:00")
    converted = json.loads(replies["c2"])
    assert converted["source"]["timezone"] == "Europe/Paris"
    assert converted["target"]["timezone"] == "America/New_York"
    assert converted["target"]["datetime"][11:16] in {"03:30", "04:30"}  # daylight saving
    assert "Mars/Olympus" in replies["c3"]
    calls = {call.call_id: call for call in ToolCall.objects.all()}
    assert (calls["c1"].server, calls["c1"].status) == ("time", "completed")
    # Its tools say readOnlyHint: they run without asking, with no terminal to ask at.
    assert {(call.policy, call.approval) for call in calls.values()} == {("run", "")}
    assert calls["c3"].status == "failed" and calls["c3"].failure == "tool_error"
    assert "Mars/Olympus" in calls["c3"].error
    assert McpServer.objects.get().status == "up"
