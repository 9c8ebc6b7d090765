"""Tests of manage.py mcp (add, list, refresh, remove) and of MCP tools in manage.py chat, with
real MCP servers (streamable HTTP and stdio) and a strict local OpenAI provider."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from collections.abc import Iterator
from io import StringIO

import pytest
from django.conf import LazySettings
from django.core.management import CommandError, call_command

from chat import agent
from chat.agent.mcp import Connection, ServerConfig
from chat.models import Conversation, McpServer, McpTool, ToolCall
from chat.runs import mcp as hub_module
from chat.testing.mcp_server import STDIO_COMMAND, McpHttpServer
from chat.testing.openai_script import text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.testing.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)
STDIO = " ".join(shlex.quote(word) for word in STDIO_COMMAND)


@pytest.fixture(scope="module")
def docs_http() -> Iterator[McpHttpServer]:
    with McpHttpServer("docs") as server:
        yield server


def mcp(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("mcp", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def chat(*args: str) -> str:
    out = StringIO()
    call_command("chat", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}/mcp"


def test_add_over_http_stores_the_server_and_its_tools_never_the_secret(
    docs_http: McpHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLAB_MCP_KEY_DOCS", "docs-secret-value")

    out, err = mcp(
        "add", "docs", "--url", docs_http.url, "--header", "Authorization=AGENTLAB_MCP_KEY_DOCS"
    )

    assert "Added docs (http: " in out and "docs__search_docs" in out
    assert "Search the team docs" in out and err == ""
    server = McpServer.objects.get(name="docs")
    assert (server.transport, server.url, server.status) == ("http", docs_http.url, "up")
    assert server.headers == {"Authorization": "AGENTLAB_MCP_KEY_DOCS"}
    names = set(McpTool.objects.filter(server=server).values_list("exposed_name", flat=True))
    assert {"docs__search_docs", "docs__add", "docs__grow"} <= names
    stored = json.dumps(list(McpServer.objects.values()), default=str)
    assert "docs-secret-value" not in stored


def test_add_over_stdio_with_a_timeout_and_an_unset_variable() -> None:
    out, err = mcp(
        "add",
        "local",
        "--command",
        STDIO,
        "--env",
        "DOCS_TOKEN=AGENTLAB_MCP_KEY_UNSET",
        "--timeout",
        "5",
    )

    assert "Added local (stdio: " in out and "local__pid" in out
    assert "AGENTLAB_MCP_KEY_UNSET is not set in this process" in err
    server = McpServer.objects.get(name="local")
    assert (server.transport, server.command, server.args) == (
        "stdio",
        sys.executable,
        ["-m", "chat.testing.mcp_server"],
    )
    assert server.env == {"DOCS_TOKEN": "AGENTLAB_MCP_KEY_UNSET"} and server.timeout == 5.0
    assert McpTool.objects.filter(server=server, exposed_name="local__echo").exists()


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        (["--url", "CLOSED"], "ConnectError"),
        (["--command", "/nonexistent/mcp-server --stdio"], "FileNotFoundError"),
    ],
    ids=["closed port", "no such command"],
)
def test_a_server_that_does_not_answer_is_refused_with_the_reason(
    target: list[str], reason: str
) -> None:
    target = [closed_url() if word == "CLOSED" else word for word in target]
    with pytest.raises(CommandError, match=f"^down did not answer initialize: .*{reason}"):
        mcp("add", "down", *target)
    assert not McpServer.objects.exists() and not McpTool.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--header", "Authorization=SECRET_KEY"], "SECRET_KEY is one of the server's own"),
        (["--header", "Authorization=HOME"], "HOME is not an allowed MCP variable"),
        (["--header", "Authorization=OPENAI_API_KEY"], "OPENAI_API_KEY holds a provider's key"),
        (["--header", "Authorization=AGENTLAB_KEY_DOCS"], "AGENTLAB_KEY_DOCS holds a provider"),
        (["--header", "Authorization=MISTRAL_API_KEY"], "MISTRAL_API_KEY holds a provider"),
        (["--header", "X=AGENTLAB_MCP_KEY_VARIABLES"], "one of the server's own secrets"),
        (["--header", "Bad Name=AGENTLAB_MCP_KEY_X"], "headers: 'Bad Name' is not a name"),
        (["--header", "Authorization"], "expected HEADER=ENV_VAR"),
        (["--command", "x"], "Give either --url URL"),
        (["--env", "TOKEN=AGENTLAB_MCP_KEY_X"], "--env is for a stdio server"),
        (["--timeout", "0"], "timeout: a positive number"),
        (["--timeout", "nan"], "timeout: a positive number"),
    ],
)
def test_bad_http_input_is_refused_and_writes_nothing(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        mcp("add", "docs", "--url", closed_url(), *args)
    assert not McpServer.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bad name!", "--url", "http://127.0.0.1:9/mcp"], "'bad name!' is not a server name"),
        (["docs"], "Give either --url URL"),
        (["docs", "--url", "ftp://example.com/mcp"], "url: an http:// or https:// address"),
        (["docs", "--command", "'unbalanced"], "--command cannot be read"),
        (["docs", "--command", "x", "--header", "A=AGENTLAB_MCP_KEY_X"], "--header is for"),
        (["docs", "--command", "x", "--env", "TOKEN=DATABASE_URL"], "DATABASE_URL is one of"),
        (["docs", "--command", "x", "--env", "TOKEN=OPENAI_API_KEY"], "holds a provider's key"),
        (["docs", "--command", "x", "--env", "TOKEN=AGENTLAB_KEY_X"], "holds a provider's key"),
        (["docs", "--command", "x '\udcff'"], "args: a string holds a lone surrogate"),
        (["docs", "--url", "http://h/\udcff"], "url: a string holds a lone surrogate"),
    ],
)
def test_bad_names_and_transports_are_refused_and_write_nothing(
    args: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        mcp("add", *args)
    assert not McpServer.objects.exists()


def test_a_provider_key_is_an_mcp_header_only_when_the_operator_lists_it(
    docs_http: McpHttpServer, settings: LazySettings
) -> None:
    header = ["--header", "Authorization=OPENAI_API_KEY"]
    with pytest.raises(CommandError, match="OPENAI_API_KEY holds a provider's key"):
        mcp("add", "docs", "--url", docs_http.url, *header)
    assert not McpServer.objects.exists()

    settings.AGENTLAB_MCP_KEY_VARIABLES = ["OPENAI_API_KEY"]
    out, _ = mcp("add", "docs", "--url", docs_http.url, *header)

    assert "Added docs" in out
    assert McpServer.objects.get().headers == {"Authorization": "OPENAI_API_KEY"}


def test_list_refuses_a_stored_provider_key_header_before_connecting(
    settings: LazySettings,
) -> None:
    settings.OPENAI_API_KEY = "sk-provider-secret-4242"
    headers = {"Authorization": "OPENAI_API_KEY"}
    McpServer.objects.create(name="old", transport="http", url=closed_url(), headers=headers)

    out, err = mcp("list")

    assert (
        "down: its configuration is refused, nothing was sent: headers: Authorization: "
        "OPENAI_API_KEY holds a provider's key" in out
    )
    assert "ConnectError" not in out and "sk-provider-secret-4242" not in out + err


def test_a_duplicate_name_is_refused(docs_http: McpHttpServer) -> None:
    mcp("add", "docs", "--url", docs_http.url)
    with pytest.raises(CommandError, match="An MCP server named 'docs' exists already"):
        mcp("add", "docs", "--command", STDIO)
    assert McpServer.objects.get().transport == "http"


def test_list_checks_each_server_and_reports_one_that_is_down(docs_http: McpHttpServer) -> None:
    mcp("add", "docs", "--url", docs_http.url)
    gone = McpServer.objects.create(name="gone", transport="http", url=closed_url())
    McpServer.objects.create(name="off", transport="stdio", command="/nowhere", enabled=False)

    out, _ = mcp("list")

    lines = {line.split()[0]: line for line in out.splitlines()}
    assert lines["SERVER"].split() == ["SERVER", "TRANSPORT", "TARGET", "STATUS", "TOOLS"]
    assert docs_http.url in lines["docs"] and " up " in lines["docs"]
    assert "docs__search_docs" in lines["docs"]
    assert "down: " in lines["gone"] and "ConnectError" in lines["gone"]
    assert "disabled" in lines["off"]
    gone.refresh_from_db()
    assert gone.status == "down" and "ConnectError" in gone.error and gone.checked_at

    out, _ = mcp("list", "--json")

    servers = {server["name"]: server for server in json.loads(out)["servers"]}
    assert servers["docs"]["status"] == "up" and servers["docs"]["error"] is None
    assert {"exposed_name": "docs__add", "name": "add", "available": True}.items() <= (
        next(t for t in servers["docs"]["tools"] if t["name"] == "add").items()
    )
    assert servers["gone"]["status"] == "down" and "ConnectError" in servers["gone"]["error"]
    assert servers["off"]["enabled"] is False and servers["off"]["tools"] == []


def test_refresh_says_what_was_added_changed_or_is_no_longer_listed() -> None:
    with McpHttpServer("team") as team:  # its own: `grow` changes the server for good
        mcp("add", "team", "--url", team.url)
        asyncio.run(_call(team.url, "grow"))
        McpTool.objects.filter(exposed_name="team__add").delete()
        McpTool.objects.filter(exposed_name="team__echo").update(description="Old words.")
        McpTool.objects.create(
            server=McpServer.objects.get(), name="retired", exposed_name="team__retired"
        )

        out, _ = mcp("refresh", "team")

    assert "added: team__add, team__late_tool" in out
    assert "changed: team__echo" in out
    assert "no longer listed: team__retired" in out
    assert not McpTool.objects.get(exposed_name="team__retired").available
    assert McpTool.objects.get(exposed_name="team__echo").description.startswith("Echo")


def test_refresh_of_every_server_fails_when_one_is_down(docs_http: McpHttpServer) -> None:
    mcp("add", "docs", "--url", docs_http.url)
    McpServer.objects.create(name="gone", transport="http", url=closed_url())

    with pytest.raises(CommandError, match="did not answer: gone"):
        mcp("refresh")

    assert McpServer.objects.get(name="gone").status == "down"
    with pytest.raises(CommandError, match="No MCP server named 'nope'"):
        mcp("refresh", "nope")


def test_refresh_without_changes_says_so() -> None:
    mcp("add", "local", "--command", STDIO)

    out, _ = mcp("refresh")

    assert out.startswith("local: ") and "nothing changed" in out


def test_remove_deletes_the_server_and_its_tools_and_keeps_choices(
    docs_http: McpHttpServer,
) -> None:
    mcp("add", "docs", "--url", docs_http.url)
    out = chat("hi", "--tool", "docs__search_docs", "--json")
    conversation = Conversation.objects.get(pk=json.loads(out)["conversation"])

    out, _ = mcp("remove", "docs")

    assert out.startswith("Removed docs and its ") and "keep the choice" in out
    assert not McpServer.objects.exists() and not McpTool.objects.exists()
    conversation.refresh_from_db()
    assert conversation.agent_parameters().enabled_tools == ("docs__search_docs",)
    with pytest.raises(CommandError, match="No MCP server named 'docs'"):
        mcp("remove", "docs")


def test_chat_calls_an_mcp_tool_through_a_strict_provider(
    docs_http: McpHttpServer, fake_openai: FakeOpenAIServer
) -> None:
    mcp("add", "docs", "--url", docs_http.url)
    fake_openai.enqueue(
        tool_turn([("c1", "docs__search_docs", '{"query": "deploys"}')]),
        text_turn("Deploys run from main."),
    )
    base = ["--base-url", fake_openai.base_url, "--model", "m-1"]
    tool = "docs__search_docs"  # it does not say it only reads: it asks first

    result = json.loads(
        chat("How do deploys work?", "--tool", tool, "--approve", tool, *base, "--json")
    )

    assert result["status"] == "completed" and result["text"] == "Deploys run from main."
    offered = [tool["function"]["name"] for tool in fake_openai.requests[0].body["tools"]]
    assert offered == ["docs__search_docs"]
    messages = fake_openai.requests[1].body["messages"]
    reply = next(m["content"] for m in messages if m.get("tool_call_id") == "c1")
    assert json.loads(reply)["matches"][0]["title"] == "Deploying"
    call = ToolCall.objects.get()
    assert (call.server, call.status) == ("docs", "completed")
    assert call.raw_result["structuredContent"]["query"] == "deploys"
    assert fake_openai.pending == 0
    # The command's event loop is over: so are its connections and its registrations.
    assert hub_module.hub.connections == {}
    assert "docs__search_docs" not in agent.default_registry


def test_an_mcp_tool_without_the_read_only_hint_asks_and_no_terminal_denies_it(
    docs_http: McpHttpServer, fake_openai: FakeOpenAIServer
) -> None:
    mcp("add", "docs", "--url", docs_http.url)
    fake_openai.enqueue(
        tool_turn([("c1", "docs__search_docs", '{"query": "deploys"}')]),
        text_turn("I was not allowed to search."),
    )
    base = ["--base-url", fake_openai.base_url, "--model", "m-1"]

    result = json.loads(
        chat("How do deploys work?", "--tool", "docs__search_docs", *base, "--json")
    )

    assert result["status"] == "completed"
    messages = fake_openai.requests[1].body["messages"]
    reply = next(m["content"] for m in messages if m.get("tool_call_id") == "c1")
    assert reply.startswith("The user denied this call: no one at the terminal")
    call = ToolCall.objects.get()
    # Asked on the live server's word (no readOnlyHint), it keeps the server it was asked on.
    assert (call.policy, call.approval, call.server) == ("ask", "denied", "docs")
    assert call.raw_result is None  # the server never saw it


def test_all_tools_offers_every_enabled_server_whole(
    docs_http: McpHttpServer, fake_openai: FakeOpenAIServer
) -> None:
    mcp("add", "docs", "--url", docs_http.url)
    McpServer.objects.create(name="off", transport="http", url=closed_url(), enabled=False)
    fake_openai.enqueue(text_turn("Hello."), text_turn("Again."))
    base = ["--base-url", fake_openai.base_url, "--model", "m-1"]

    result = json.loads(chat("hi", "--all-tools", *base, "--json"))

    offered = {tool["function"]["name"] for tool in fake_openai.requests[0].body["tools"]}
    assert {"get_current_time", "docs__search_docs", "docs__grow"} <= offered
    parameters = Conversation.objects.get(pk=result["conversation"]).agent_parameters()
    assert "docs__*" in parameters.enabled_tools and "off__*" not in parameters.enabled_tools

    chat("again", "--tool", "docs__*", *base)
    offered = {tool["function"]["name"] for tool in fake_openai.requests[1].body["tools"]}
    assert "docs__search_docs" in offered and "get_current_time" not in offered
    with pytest.raises(CommandError, match="unknown tool"):
        chat("hi", "--tool", "docs__nothing")


async def _call(url: str, tool: str) -> None:
    connection = Connection(ServerConfig(name="team", url=url))
    try:
        await connection.call(tool, {})
    finally:
        await connection.close()
