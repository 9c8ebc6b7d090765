"""Tests of `manage.py mcp edit` (a server changed in place, probed first) and of what
`mcp list` tells about each tool (its input schema and annotations; task-only tools), with real
MCP servers over streamable HTTP and stdio."""

from __future__ import annotations

import json
import shlex
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from chat.models import Conversation, McpServer, McpTool
from chat.testing.mcp_server import STDIO_COMMAND, TASK_ONLY, McpHttpServer
from chat.testing.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)
STDIO = " ".join(shlex.quote(word) for word in STDIO_COMMAND)


def mcp(*args: str) -> str:
    out = StringIO()
    call_command("mcp", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_edit_moves_a_server_to_a_new_url_and_keeps_its_tools_and_choices(
    docs_http: McpHttpServer, user: object
) -> None:
    mcp("add", "docs", "--command", STDIO)
    tool = McpTool.objects.get(exposed_name="docs__search_docs")
    conversation = Conversation.objects.create(
        owner=user, parameters={"enabled_tools": [tool.exposed_name]}
    )

    out = mcp(
        "edit",
        "docs",
        "--url",
        docs_http.url,
        "--header",
        "X-Team=AGENTLAB_MCP_KEY_TEAM",
        "--timeout",
        "12",
    )

    assert out.startswith("Changed docs: ")
    assert "url: " + docs_http.url in out and "command: (none)" in out
    assert "headers: X-Team" in out and "timeout: 12.0" in out
    assert "nothing changed" in out  # the same tools, listed over HTTP now
    server = McpServer.objects.get(name="docs")
    assert (server.transport, server.url, server.command, server.args) == (
        "http",
        docs_http.url,
        "",
        [],
    )
    assert server.headers == {"X-Team": "AGENTLAB_MCP_KEY_TEAM"} and server.timeout == 12
    assert McpTool.objects.get(exposed_name="docs__search_docs").pk == tool.pk
    conversation.refresh_from_db()
    assert conversation.parameters["enabled_tools"] == ["docs__search_docs"]

    out = mcp("edit", "docs", "--remove-header", "X-Team", "--disable")
    server.refresh_from_db()
    assert out.strip() == "Changed docs: headers: X-Team; disabled."
    assert server.headers == {} and server.enabled is False


def test_an_edit_the_server_does_not_answer_changes_nothing(docs_http: McpHttpServer) -> None:
    mcp("add", "docs", "--url", docs_http.url)
    closed = f"http://127.0.0.1:{free_port()}/mcp"

    with pytest.raises(
        CommandError,
        match=r"did not answer initialize with the new settings; nothing was changed: "
        r".*ConnectError",
    ):
        mcp("edit", "docs", "--url", closed)

    assert McpServer.objects.get().url == docs_http.url
    out = mcp("edit", "docs", "--url", closed, "--no-check")
    assert McpServer.objects.get().url == closed and "nothing changed" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "Nothing to change"),
        (
            [
                "--url",
                "ftp://x",
            ],
            "url: an http:// or https:// address is needed.",
        ),
        (["--env", "TOKEN=AGENTLAB_MCP_KEY_X"], "--env is for a stdio server"),
        (["--header", "novalue"], "--header 'novalue': expected HEADER=ENV_VAR"),
        (["--remove-header", "Authorization"], "has no 'Authorization' to remove"),
        (["--header", "Authorization=SECRET_KEY"], "SECRET_KEY"),
        (["--timeout", "-1"], "timeout: a positive number of seconds is needed."),
        (["--url", "http://a/mcp", "--command", "x"], "not both"),
    ],
)
def test_bad_edits_are_refused_and_change_nothing(
    docs_http: McpHttpServer, args: list[str], message: str
) -> None:
    mcp("add", "docs", "--url", docs_http.url)
    before = McpServer.objects.values().get()

    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        mcp("edit", "docs", *args)

    assert McpServer.objects.values().get() == before
    with pytest.raises(CommandError, match="No MCP server named 'nope'"):
        mcp("edit", "nope", "--timeout", "5")


def test_list_json_has_each_tools_schema_and_annotations_and_marks_task_only_tools() -> None:
    mcp("add", "local", "--command", STDIO)

    out = mcp("list", "--json")

    tools = {tool["name"]: tool for tool in json.loads(out)["servers"][0]["tools"]}
    search = tools["search_docs"]
    assert search["input_schema"]["properties"]["query"]["type"] == "string"
    assert search["input_schema"]["required"] == ["query"]
    assert search["offered"] is True and search["task_support"] is None
    assert tools[TASK_ONLY]["offered"] is False and tools[TASK_ONLY]["task_support"] == "required"
    assert "annotations" in search

    table = mcp("list")
    assert f"local__{TASK_ONLY} (runs only as an MCP task: not offered)" in table
