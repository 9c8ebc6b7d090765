"""Who may configure an MCP server, and which secrets it may be given: the admin's real views for
a staff member who is not a superuser, the MCP allow-list of variables at configuration and at
connection time, and a configured secret that never shows."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import LazySettings
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from chat.agent.mcp import McpUnavailable
from chat.models import McpServer, ModelCall, Run, ToolCall
from chat.runs.mcp import refresh_all, server_config
from chat.runs.providers import KeyStatus, key_status, mcp_variable_problem
from chat.testing import factories as make
from chat.testing.mcp_server import STDIO_COMMAND, McpHttpServer
from chat.testing.openai_script import text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.testing.processes import free_port
from tests.test_admin import mcp_server_form

pytestmark = pytest.mark.django_db
COMMAND, *ARGS = STDIO_COMMAND
PROVIDER_SECRET = "sk-provider-secret-4242"
MCP_SECRET = "mcp-docs-secret-7373"


def admin_url(view: str, *args: object) -> str:
    return reverse(f"admin:chat_mcpserver_{view}", args=args)


def closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}/mcp"


def server_form(**fields: str) -> dict[str, str]:
    """An HTTP server's form as a browser posts it."""
    return mcp_server_form(**{"url": "http://127.0.0.1:9/mcp", **fields})


def stdio_form(**fields: str) -> dict[str, str]:
    stdio = {"transport": "stdio", "url": "", "command": COMMAND, "args": json.dumps(ARGS)}
    return server_form(**{**stdio, **fields})


def errors(response: Any) -> dict[str, list[str]]:
    form = response.context["adminform"].form
    return {field: list(texts) for field, texts in form.errors.items()}


def staff_with(client: Client, *codenames: str) -> Client:
    """The client, logged in as staff (not a superuser) holding only these MCP permissions."""
    clerk = make.user("clerk", is_staff=True)
    clerk.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(clerk)
    return client


@pytest.fixture
def editor(client: Client) -> Client:
    """Staff who may add, change and view MCP servers, and is not a superuser."""
    return staff_with(client, "add_mcpserver", "change_mcpserver", "view_mcpserver")


@pytest.fixture
def provider_keys(monkeypatch: pytest.MonkeyPatch, settings: LazySettings) -> None:
    """A provider's key in each place one may be: OPENAI_API_KEY, AGENTLAB_KEY_*, a listed one."""
    settings.OPENAI_API_KEY = PROVIDER_SECRET
    monkeypatch.setenv("AGENTLAB_KEY_DOCS", PROVIDER_SECRET)
    monkeypatch.setenv("MISTRAL_API_KEY", PROVIDER_SECRET)


def test_staff_who_may_change_servers_cannot_add_a_stdio_command(editor: Client) -> None:
    response = editor.post(admin_url("add"), stdio_form())

    assert response.status_code == 200
    assert errors(response)["transport"] == [
        "Only superusers may configure a stdio server: its command runs on this server, as the "
        "user that serves the site."
    ]
    assert not McpServer.objects.exists()


def test_staff_who_may_change_servers_cannot_switch_one_to_stdio(editor: Client) -> None:
    server = McpServer.objects.create(name="docs", transport="http", url="http://127.0.0.1:9/mcp")

    response = editor.post(admin_url("change", server.pk), stdio_form())

    assert response.status_code == 200 and "Only superusers" in errors(response)["transport"][0]
    server.refresh_from_db()
    assert (server.transport, server.command, server.args) == ("http", "", [])


def test_staff_who_may_change_servers_cannot_change_a_stdio_command(editor: Client) -> None:
    server = McpServer.objects.create(name="local", transport="stdio", command=COMMAND, args=ARGS)
    page = editor.get(admin_url("change", server.pk)).content.decode()
    assert 'name="command"' not in page and 'name="args"' not in page and 'name="env"' not in page
    assert "only superusers may add or change one" in page

    response = editor.post(
        admin_url("change", server.pk),
        stdio_form(
            name="local",
            timeout="30",
            command="/bin/sh",
            args='["-c", "cat var/secret_key"]',
            env='{"TOKEN": "AGENTLAB_MCP_KEY_DOCS"}',
        ),
    )

    assert response.status_code == 302, errors(response)
    server.refresh_from_db()
    assert server.timeout == 30, "what is not the command stays theirs to change"
    assert (server.command, server.args, server.env) == (COMMAND, ARGS, {})


def test_the_form_says_only_superusers_configure_stdio(editor: Client) -> None:
    page = editor.get(admin_url("add")).content.decode()

    assert "Only superusers may choose stdio." in page
    assert 'name="command"' not in page
    assert "AGENTLAB_MCP_KEY_VARIABLES" in page


def test_a_superuser_configures_a_stdio_command(staff: Client) -> None:
    page = staff.get(admin_url("add")).content.decode()
    assert 'name="command"' in page and "Only superusers may set or change it" in page

    response = staff.post(admin_url("add"), stdio_form(env='{"TOKEN": "AGENTLAB_MCP_KEY_DOCS"}'))

    assert response.status_code == 302
    server = McpServer.objects.get()
    assert (server.transport, server.command, server.args) == ("stdio", COMMAND, ARGS)
    assert server.env == {"TOKEN": "AGENTLAB_MCP_KEY_DOCS"}


@pytest.mark.usefixtures("provider_keys")
@pytest.mark.parametrize("variable", ["OPENAI_API_KEY", "AGENTLAB_KEY_DOCS", "MISTRAL_API_KEY"])
def test_staff_who_may_only_add_servers_cannot_send_a_provider_key(
    client: Client, variable: str
) -> None:
    clerk = staff_with(client, "add_mcpserver")
    headers = json.dumps({"Authorization": variable})

    response = clerk.post(
        admin_url("add"), server_form(url="https://example.com/mcp", headers=headers)
    )

    assert response.status_code == 200
    assert errors(response)["headers"] == [
        f"Authorization: {variable} holds a provider's key: it is never sent to an MCP server "
        "unless the server lists it in AGENTLAB_MCP_KEY_VARIABLES."
    ]
    assert not McpServer.objects.exists()
    assert PROVIDER_SECRET not in response.content.decode()


@pytest.mark.usefixtures("provider_keys")
def test_a_superuser_cannot_give_a_stdio_server_a_provider_key_either(staff: Client) -> None:
    response = staff.post(admin_url("add"), stdio_form(env='{"OPENAI_API_KEY": "OPENAI_API_KEY"}'))

    assert response.status_code == 200
    assert "OPENAI_API_KEY holds a provider's key" in errors(response)["env"][0]
    assert not McpServer.objects.exists()


def test_mcp_variables_are_allowed_and_a_provider_key_only_when_listed_on_purpose(
    client: Client, settings: LazySettings
) -> None:
    clerk = staff_with(client, "add_mcpserver")
    headers = '{"Authorization": "AGENTLAB_MCP_KEY_DOCS", "X-Team": "TEAM_TOKEN"}'
    settings.AGENTLAB_MCP_KEY_VARIABLES = ["TEAM_TOKEN", "OPENAI_API_KEY"]

    response = clerk.post(admin_url("add"), server_form(headers=headers))
    assert response.status_code == 302
    response = clerk.post(
        admin_url("add"), server_form(name="llm", headers='{"Authorization": "OPENAI_API_KEY"}')
    )
    assert response.status_code == 302
    assert McpServer.objects.count() == 2
    assert mcp_variable_problem("TEAM_TOKEN") is None
    assert "one of the server's own secrets" in (mcp_variable_problem("SECRET_KEY") or "")
    assert "own secrets" in (mcp_variable_problem("AGENTLAB_MCP_KEY_VARIABLES") or "")


@pytest.mark.usefixtures("provider_keys")
@pytest.mark.parametrize(
    ("transport", "fields"),
    [
        (
            "http",
            {"url": "https://example.com/mcp", "headers": {"Authorization": "OPENAI_API_KEY"}},
        ),
        ("http", {"url": "https://example.com/mcp", "headers": {"X-Key": "AGENTLAB_KEY_DOCS"}}),
        ("stdio", {"command": COMMAND, "args": ARGS, "env": {"KEY": "MISTRAL_API_KEY"}}),
        ("stdio", {"command": COMMAND, "args": ARGS, "env": {"HOME": "HOME"}}),
    ],
)
def test_server_config_never_resolves_a_variable_off_the_mcp_allow_list(
    transport: str, fields: dict[str, Any]
) -> None:
    server = McpServer.objects.create(name="old", transport=transport, **fields)

    with pytest.raises(McpUnavailable) as refused:
        server_config(server)

    assert str(refused.value).startswith("its configuration is refused, nothing was sent: ")
    assert PROVIDER_SECRET not in str(refused.value)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("provider_keys")
def test_a_stored_provider_key_header_marks_the_server_down_without_connecting(
    staff: Client, settings: LazySettings
) -> None:
    server = McpServer.objects.create(
        name="old", transport="http", url=closed_url(), headers={"Authorization": "OPENAI_API_KEY"}
    )

    (result,) = async_to_sync(refresh_all)([server]).values()

    assert isinstance(result, McpUnavailable)
    assert "OPENAI_API_KEY holds a provider's key" in str(result), "refused before any ConnectError"
    server.refresh_from_db()
    assert server.status == "down" and "configuration is refused" in server.error
    page = staff.get(admin_url("change", server.pk)).content.decode()
    assert "Authorization ← OPENAI_API_KEY (not allowed)" in page
    assert PROVIDER_SECRET not in page

    settings.AGENTLAB_MCP_KEY_VARIABLES = ["OPENAI_API_KEY"]
    assert server_config(server).headers == {"Authorization": PROVIDER_SECRET}
    assert key_status("OPENAI_API_KEY", mcp=True) is KeyStatus.SET


@pytest.mark.parametrize(
    ("field", "text", "reason"),
    [
        ("headers", "[" * 3000 + "]" * 3000, "nested more than 64 levels deep"),
        ("headers", '{"Authorization": NaN}', "NaN is not a JSON number"),
        ("headers", '{"A": 1e999}', "too large a number"),
        ("headers", '{"\\ud800": "AGENTLAB_MCP_KEY_DOCS"}', "lone surrogate"),
        ("args", '["\\udcff"]', "lone surrogate"),
        ("env", '{"TOKEN": "\\ud800"}', "lone surrogate"),
    ],
    ids=["deep", "nan", "huge", "surrogate name", "surrogate arg", "surrogate variable"],
)
def test_bad_json_is_one_error_on_its_field_and_nothing_is_stored(
    staff: Client, field: str, text: str, reason: str
) -> None:
    form = stdio_form() if field in {"args", "env"} else server_form()

    response = staff.post(admin_url("add"), {**form, field: text})

    assert response.status_code == 200
    (message,) = errors(response)[field]
    assert reason in message
    assert not McpServer.objects.exists()


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"headers": '{"Bad Name": "AGENTLAB_MCP_KEY_DOCS"}'}, "headers", "is not a name"),
        ({"headers": '["Authorization"]'}, "headers", "Enter an object of names"),
        ({"headers": '{"Authorization": ""}'}, "headers", "no variable named"),
        ({"args": '["a\\u0000b"]'}, "args", "a string holds a NUL character"),
        ({"args": '"-m"'}, "args", "Enter a list of strings"),
        ({"env": '{"A B": "AGENTLAB_MCP_KEY_DOCS"}'}, "env", "is not a name"),
    ],
)
def test_a_misshapen_configuration_is_refused_on_its_field(
    staff: Client, fields: dict[str, str], field: str, reason: str
) -> None:
    form = server_form(**fields) if "headers" in fields else stdio_form(**fields)

    response = staff.post(admin_url("add"), form)

    assert response.status_code == 200
    assert reason in errors(response)[field][0]
    assert not McpServer.objects.exists()


@pytest.fixture(scope="module")
def docs_http() -> Iterator[McpHttpServer]:
    with McpHttpServer("docs") as server:
        yield server


@pytest.mark.django_db(transaction=True)
def test_a_configured_header_value_never_appears_in_a_page_or_a_log(
    editor: Client,
    docs_http: McpHttpServer,
    fake_openai: FakeOpenAIServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("AGENTLAB_MCP_KEY_DOCS", MCP_SECRET)
    headers = '{"Authorization": "AGENTLAB_MCP_KEY_DOCS"}'
    form = server_form(url=docs_http.url, headers=headers, _refresh="Check and refresh tools")

    response = editor.post(admin_url("add"), form, follow=True)

    server = McpServer.objects.get()
    assert server.status == "up" and server.tools.filter(name="search_docs").exists()
    assert server_config(server).headers == {"Authorization": MCP_SECRET}, "it is sent there"
    fake_openai.enqueue(
        tool_turn([("c1", "docs__search_docs", '{"query": "deploys"}')]), text_turn("From main.")
    )
    out = StringIO()
    call_command(
        "chat",
        "How do deploys work?",
        "--tool",
        "docs__search_docs",
        "--approve",
        "docs__search_docs",
        "--base-url",
        fake_openai.base_url,
        "--model",
        "m-1",
        "--json",
        stdout=out,
        stderr=out,
    )
    assert ToolCall.objects.get().status == "completed"
    listing = StringIO()
    call_command("mcp", "list", "--json", stdout=listing, stderr=listing)
    pages = [
        response.content.decode(),
        editor.get(admin_url("changelist")).content.decode(),
        editor.get(admin_url("change", server.pk)).content.decode(),
        editor.get(admin_url("history", server.pk)).content.decode(),
    ]
    rows = [
        list(McpServer.objects.values()),
        list(LogEntry.objects.values()),
        list(Run.objects.values()),
        list(ToolCall.objects.values()),
        list(ModelCall.objects.values()),
    ]
    assert "Authorization ← AGENTLAB_MCP_KEY_DOCS (set)" in pages[2]
    seen = [*pages, json.dumps(rows, default=str), out.getvalue(), listing.getvalue()]
    seen += [caplog.text, json.dumps(fake_openai.requests, default=str)]
    assert not [text for text in seen if MCP_SECRET in text]
