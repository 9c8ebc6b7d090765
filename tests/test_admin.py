from __future__ import annotations

import json
import re

import pytest
from django.conf import LazySettings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from chat import agent, agents, transcripts
from chat.agent.redaction import redact
from chat.models import (
    Conversation,
    HistoryRepair,
    McpServer,
    McpTool,
    Message,
    ModelCall,
    ProviderProfile,
    Purpose,
    Run,
    ToolCall,
    Version,
)
from chat.runs.providers import known_keys
from chat.testing import factories as make
from chat.testing.mcp_server import STDIO_COMMAND
from chat.transcripts import versions

pytestmark = pytest.mark.django_db

MODELS = [Conversation, Run, Message, ToolCall, ModelCall, HistoryRepair]


def url(model: type, view: str, *args: object) -> str:
    return reverse(f"admin:chat_{model._meta.model_name}_{view}", args=args)


@pytest.fixture
def rich() -> Conversation:
    return make.rich_conversation(make.user("ada"))


def test_every_model_has_a_changelist_and_a_change_page_for_staff(
    staff: Client, rich: Conversation
) -> None:
    for model in MODELS:
        listing = staff.get(url(model, "changelist"))
        assert listing.status_code == 200, model
        row = model.objects.order_by("pk").first()
        page = staff.get(url(model, "change", row.pk))
        assert page.status_code == 200, model
        assert b'name="_save"' not in page.content, f"{model.__name__} is editable"


def test_non_staff_and_anonymous_are_sent_to_the_login_page(
    client: Client, rich: Conversation
) -> None:
    pages = [url(model, "changelist") for model in MODELS]
    pages.append(url(Conversation, "change", rich.pk))
    for page in pages:
        response = client.get(page)
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    client.force_login(make.user("bob"))
    for page in pages:
        response = client.get(page)
        assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_conversation_list_counts_runs_tool_calls_and_tokens(
    staff: Client, rich: Conversation
) -> None:
    response = staff.get(url(Conversation, "changelist"))

    (row,) = response.context["cl"].result_list
    assert (row.model_name, row.run_count, row.tool_call_count, row.total_tokens) == (
        "m-1",
        2,
        2,
        42,
    )
    assert b"Time and notes" in response.content and b"ada" in response.content


def test_transcript_shows_tool_calls_results_reasoning_and_runs(
    staff: Client, rich: Conversation
) -> None:
    long_result = "x" * 5000 + "THE-END"
    ToolCall.objects.filter(call_id="call_a").update(result=long_result)
    Message.objects.filter(conversation=rich, tool_call_id="call_a").update(content=long_result)

    html = staff.get(url(Conversation, "change", rich.pk)).content.decode()

    transcript = html[html.index('id="transcript"') :]
    roles = re.findall(r'class="chat-message chat-message--(\w+)"', transcript)
    assert roles == ["user", "assistant", "tool", "tool", "assistant", "user", "assistant"]
    assert "Leave a note &lt;b&gt;too&lt;/b&gt;." in transcript
    assert "<b>too</b>" not in transcript
    assert "{\n  &quot;timezone&quot;: &quot;Europe/Paris&quot;\n}" in transcript
    assert re.search(r'class="pill pill-completed"[^>]*>Get current time<', transcript)
    failed = re.search(r'class="pill pill-failed"[^>]*title="([^"]*)"', transcript)
    assert failed is not None and failed.group(1) == "note is too short"
    assert "Handoff note" in transcript
    assert '<details class="chat-reasoning"><summary>Reasoning' in transcript
    assert "The user wants two tools." in transcript
    assert "content: <code>null</code>" in transcript
    assert "content: <code>&quot;&quot;</code>" in transcript
    assert "5,007 characters in all" in transcript and "THE-END" in transcript
    assert "first token 0.25 s" in transcript and "duration 1.50 s" in transcript
    assert "30 prompt + 12 completion = 42 tokens" in transcript
    assert "HTTP 500: upstream exploded" in transcript
    assert transcript.count('href="/admin/chat/modelcall/') == 3


def test_model_call_page_shows_the_request_with_secrets_redacted(staff: Client) -> None:
    rich = make.rich_conversation(make.user("ada"))
    model_call = ModelCall.objects.filter(run__conversation=rich).first()
    assert model_call is not None
    model_call.request = {
        "model": "m-1",
        "max_tokens": 50,
        "extra_headers": {
            "Authorization": "Bearer sk-live-123456789",
            "X-Api-Key": "xk-secret-header",
        },
        "messages": [{"role": "user", "content": "my key is sk-abcdefghijklmnopqrstuv"}],
    }
    model_call.save()

    html = staff.get(url(ModelCall, "change", model_call.pk)).content.decode()

    assert "sk-live-123456789" not in html and "xk-secret-header" not in html
    assert "sk-abcdefghijklmnopqrstuv" not in html
    assert html.count("[REDACTED]") == 3
    assert "&quot;max_tokens&quot;: 50" in html


def test_redact_keeps_token_counts_and_removes_configured_key(settings: LazySettings) -> None:
    settings.OPENAI_API_KEY = "plain-secret-value"
    value = {
        "max_tokens": 5,
        "api_key": "abc",
        "password": "",
        "messages": [{"content": "echo plain-secret-value"}],
    }
    assert redact(value, known_keys()) == {
        "max_tokens": 5,
        "api_key": "[REDACTED]",
        "password": "",
        "messages": [{"content": "echo [REDACTED]"}],
    }


def test_search_by_title_message_text_and_tool_name(staff: Client) -> None:
    owner = make.user("ada")
    noted = make.rich_conversation(owner, title="Alpha")
    other = make.conversation(owner, "Beta")
    transcripts.append_messages(other, [agent.ChatMessage(role="user", content="about zebras")])

    def found(term: str) -> set[int]:
        response = staff.get(url(Conversation, "changelist"), {"q": term})
        return {row.pk for row in response.context["cl"].result_list}

    assert found("beta") == {other.pk}
    assert found("zebras") == {other.pk}
    assert found("handoff_note") == {noted.pk}
    assert found("10:30 Paris") == {noted.pk}
    assert found("zebras alpha") == set()
    assert found("") == {noted.pk, other.pk}


def test_filters_by_owner_model_run_status_and_date(staff: Client) -> None:
    ada, bob = make.user("ada"), make.user("bob")
    rich = make.rich_conversation(ada)
    quiet = make.conversation(bob, "quiet", model="m-2")
    Conversation.objects.filter(pk=quiet.pk).update(updated_at=make.T0)

    def listed(**query: object) -> set[int]:
        response = staff.get(url(Conversation, "changelist"), query)
        assert response.status_code == 200
        return {row.pk for row in response.context["cl"].result_list}

    assert listed(owner__id__exact=bob.pk) == {quiet.pk}
    assert listed(model="m-1") == {rich.pk}
    assert listed(model="m-2") == {quiet.pk}
    assert listed(run_status="failed") == {rich.pk}
    assert listed(run_status="interrupted") == set()
    day = {"updated_at__gte": "2025-03-01 00:00+00:00", "updated_at__lt": "2025-03-02 00:00+00:00"}
    assert listed(**day) == {quiet.pk}
    filters = staff.get(url(Conversation, "changelist")).content.decode()
    assert "?model=m-1" in filters and "?model=m-2" in filters


def test_tool_calls_are_searchable_by_name_and_filterable_by_status(
    staff: Client, rich: Conversation
) -> None:
    def listed(**query: object) -> list[str]:
        response = staff.get(url(ToolCall, "changelist"), query)
        return sorted(row.call_id for row in response.context["cl"].result_list)

    assert listed(q="handoff") == ["call_b"]
    assert listed(status__exact="failed") == ["call_b"]
    assert listed(status__exact="completed") == ["call_a"]
    assert listed() == ["call_a", "call_b"]


def test_rows_cannot_be_added_changed_or_deleted_one_by_one(
    staff: Client, rich: Conversation
) -> None:
    message = Message.objects.filter(conversation=rich).first()
    assert message is not None
    for model in MODELS:
        assert staff.get(url(model, "add")).status_code == 403
    response = staff.post(url(Message, "change", message.pk), {"content": "edited"})
    assert response.status_code == 403
    assert staff.post(url(Message, "delete", message.pk), {"post": "yes"}).status_code == 403
    page = staff.get(url(Message, "change", message.pk)).content.decode()
    assert url(Message, "delete", message.pk) not in page
    message.refresh_from_db()
    assert message.content != "edited"


def test_deleting_a_conversation_takes_its_transcript(staff: Client, rich: Conversation) -> None:
    page = staff.get(url(Conversation, "change", rich.pk)).content.decode()
    assert url(Conversation, "delete", rich.pk) in page

    confirm = staff.get(url(Conversation, "delete", rich.pk))
    assert confirm.status_code == 200 and not confirm.context["perms_lacking"]
    response = staff.post(url(Conversation, "delete", rich.pk), {"post": "yes"})

    assert response.status_code == 302
    assert not Conversation.objects.exists()
    assert not Message.objects.exists() and not ToolCall.objects.exists()
    assert not Run.objects.exists() and not ModelCall.objects.exists()


def test_deleting_a_user_still_works_with_their_conversations(
    staff: Client, rich: Conversation
) -> None:
    owner = rich.owner
    confirm = staff.get(reverse("admin:auth_user_delete", args=[owner.pk]))
    assert confirm.status_code == 200 and not confirm.context["perms_lacking"]

    response = staff.post(reverse("admin:auth_user_delete", args=[owner.pk]), {"post": "yes"})

    assert response.status_code == 302
    assert not Conversation.objects.exists() and not ToolCall.objects.exists()


def test_staff_with_view_and_delete_permissions_only(client: Client, rich: Conversation) -> None:
    viewer = make.user("viewer", is_staff=True)
    viewer.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_conversation", "delete_conversation"])
    )
    client.force_login(viewer)

    page = client.get(url(Conversation, "change", rich.pk))
    assert page.status_code == 200 and b'id="transcript"' in page.content
    assert b'name="_save"' not in page.content
    assert client.get(url(Message, "changelist")).status_code == 403
    response = client.post(url(Conversation, "delete", rich.pk), {"post": "yes"})
    assert response.status_code == 302 and not Message.objects.exists()


def queries(client: Client, path: str) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    assert response.status_code == 200
    return len(captured.captured_queries), response.content.decode()


def page_queries(client: Client, conversation: Conversation) -> dict[str, int]:
    run = Run.objects.filter(conversation=conversation).order_by("pk").first()
    assert run is not None
    pages = {
        "conversation": url(Conversation, "change", conversation.pk),
        "run": url(Run, "change", run.pk),
        "conversations": url(Conversation, "changelist"),
        "tool calls": url(ToolCall, "changelist"),
        "messages": url(Message, "changelist"),
    }
    for path in pages.values():
        client.get(path)  # what a process caches once (content types) is not counted
    return {name: queries(client, path)[0] for name, path in pages.items()}


def test_query_count_does_not_grow_with_messages_or_tool_calls(staff: Client) -> None:
    owner = make.user("ada")
    small = make.big_conversation(owner, messages=2, tool_calls=1, runs=1, title="small")
    small_counts = page_queries(staff, small)

    big = make.big_conversation(owner, messages=500, tool_calls=1000, runs=10)
    assert Message.objects.filter(conversation=big).count() == 500
    assert ToolCall.objects.filter(run__conversation=big).count() == 1000
    big_counts = page_queries(staff, big)

    assert big_counts == small_counts
    # Session, user, conversation, forks; the window, its messages and versions; runs, model
    # calls, their leases, tool calls; the path's messages and tool calls counted.
    assert small_counts["conversation"] <= 13
    count, page = queries(staff, url(Conversation, "change", big.pk))
    assert count == small_counts["conversation"]
    assert page.count('class="chat-message ') == 500
    assert page.count('class="pill ') == 1000 + 250


def test_conversations_show_and_filter_by_their_provider_profile(staff: Client) -> None:
    owner = make.user("ada")
    mistral = ProviderProfile.objects.create(
        name="mistral", base_url="https://api.mistral.ai/v1", model="mistral-small-latest"
    )
    chosen = make.conversation(owner, "On Mistral")
    Conversation.objects.filter(pk=chosen.pk).update(profile=mistral)
    default = make.conversation(owner, "On the default")

    page = staff.get(url(Conversation, "change", chosen.pk)).content.decode()
    assert f'<a href="{url(ProviderProfile, "change", mistral.pk)}">mistral</a>' in page
    assert "Server default" in staff.get(url(Conversation, "change", default.pk)).content.decode()

    def listed(**query: object) -> dict[int, str]:
        response = staff.get(url(Conversation, "changelist"), query)
        assert response.status_code == 200
        return {row.pk: row.model_name for row in response.context["cl"].result_list}

    # With no model of its own, a conversation on a profile talks to the profile's model, and
    # one on the default endpoint to the environment's (here none: the scripted model).
    assert listed() == {chosen.pk: "mistral-small-latest", default.pk: "scripted"}
    assert listed(provider=mistral.pk) == {chosen.pk: "mistral-small-latest"}
    assert listed(provider="default") == {default.pk: "scripted"}
    listing = staff.get(url(Conversation, "changelist")).content.decode()
    assert "?provider=default" in listing and f"?provider={mistral.pk}" in listing


def test_a_profiles_conversation_count_is_what_its_link_lists(staff: Client) -> None:
    """Replays on a profile count with its chats, and its link lists them all (the
    conversation list alone shows chats)."""
    owner = make.user("ada")
    mistral = ProviderProfile.objects.create(
        name="mistral", base_url="https://api.mistral.ai/v1", model="mistral-small-latest"
    )
    chat = make.conversation(owner, "A chat")
    replay = make.conversation(owner, "A replay")
    Conversation.objects.filter(pk__in=[chat.pk, replay.pk]).update(profile=mistral)
    Conversation.objects.filter(pk=replay.pk).update(purpose=Purpose.EVAL)

    profiles = staff.get(url(ProviderProfile, "changelist")).content.decode()
    found = re.search(r'class="field-conversation_count"><a href="([^"]+)">(\d+)</a>', profiles)
    assert found is not None
    link, count = found.groups()
    listed = staff.get(link.replace("&amp;", "&")).context["cl"].result_list

    assert count == "2"
    assert {row.pk for row in listed} == {chat.pk, replay.pk}


def test_the_model_call_page_redacts_keys_named_by_profiles(
    staff: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ODD_PROVIDER_KEY", "odd-provider-key-123")
    ProviderProfile.objects.create(
        name="odd", base_url="https://odd.example/v1", model="m", api_key_env="ODD_PROVIDER_KEY"
    )
    rich = make.rich_conversation(make.user("ada"))
    model_call = ModelCall.objects.filter(run__conversation=rich).first()
    assert model_call is not None
    model_call.request = {"messages": [{"content": "echo odd-provider-key-123"}]}
    model_call.save()

    html = staff.get(url(ModelCall, "change", model_call.pk)).content.decode()

    assert "odd-provider-key-123" not in html and "[REDACTED]" in html


def test_the_admin_is_branded_and_links_to_the_chat_and_back(
    staff: Client, rich: Conversation
) -> None:
    assert "Agent Lab administration" in staff.get(reverse("admin:index")).content.decode()
    # Another user's conversation: its owner opens it in the chat, staff read it here.
    page = staff.get(url(Conversation, "change", rich.pk)).content.decode()
    assert "Open in the chat" not in page
    root = get_user_model().objects.get(username="root")
    mine = make.conversation(root, "mine")
    page = staff.get(url(Conversation, "change", mine.pk)).content.decode()
    chat_page = reverse("chat:conversation_detail", args=[mine.pk])
    assert f'<a href="{chat_page}">Open in the chat</a>' in page
    back = staff.get(chat_page).content.decode()
    assert f'href="{url(Conversation, "change", mine.pk)}">Admin transcript</a>' in back


def edited(made: Conversation, index: int, question: str, answer: str) -> Version:
    """A new version from message `index`: the active path from there is archived."""
    with transaction.atomic():
        version = versions.archive_from(made, index)
        transcripts.append_messages(
            made,
            [
                agent.ChatMessage(role="user", content=question),
                agent.ChatMessage(role="assistant", content=answer),
            ],
        )
    return version


def test_transcript_marks_versions_and_lists_the_archived_ones(
    staff: Client, rich: Conversation
) -> None:
    edited(rich, 5, "And later?", "Later.")
    edited(rich, 0, "Start over", "Fresh.")

    response = staff.get(url(Conversation, "change", rich.pk))

    assert response.status_code == 200
    html = response.content.decode()
    transcript = html[html.index('id="transcript"') : html.index('id="versions"')]
    archived = html[html.index('id="versions"') :]
    assert re.findall(r'class="chat-message chat-message--(\w+)"', transcript) == [
        "user",
        "assistant",
    ]
    assert "Start over" in transcript and "2 archived versions" in transcript
    assert "version 2 of 2 (active)" in transcript
    assert "Version 1 from message 0 · 7 messages" in archived
    inner = Version.objects.get(conversation=rich, index=5)
    assert f'Version 1 from message 5 of <a href="#version-{inner.parent_id}">' in archived
    assert "version 1 from message 0</a> · 2 messages" in archived
    assert "Leave a note &lt;b&gt;too&lt;/b&gt;." in archived and "And now?" in archived
    # The first run's tool calls and logs come with their archived messages.
    assert re.search(r'class="pill pill-completed"[^>]*>Get current time<', archived)
    assert archived.count('href="/admin/chat/run/') == 2
    assert 'name="_save"' not in html


def test_message_list_shows_and_filters_the_path(staff: Client, rich: Conversation) -> None:
    version = edited(rich, 5, "And later?", "Later.")

    listing = staff.get(url(Message, "changelist"), {"path": "archived"})
    rows = listing.context["cl"].result_list
    assert {row.version_id for row in rows} == {version.pk} and len(rows) == 2
    assert "version 1 from message 5" in listing.content.decode()
    active = staff.get(url(Message, "changelist"), {"path": "active"}).context["cl"].result_list
    assert len(active) == 7 and all(row.version_id is None for row in active)
    message = Message.objects.filter(version=version).first()
    assert message is not None
    page = staff.get(url(Message, "change", message.pk)).content.decode()
    assert "version 1 from message 5" in page


def test_transcript_renders_markdown_as_the_chat_does_with_the_raw_text_beside(
    staff: Client,
) -> None:
    made = make.conversation(make.user("ada"), "Markdown")
    reply = "Use **bold**:\n\n```python\nprint(1)\n```\n\n<script>alert(1)</script>"
    transcripts.append_messages(
        made,
        [
            agent.ChatMessage(role="user", content="show me"),
            agent.ChatMessage(role="assistant", content=reply),
        ],
    )

    html = staff.get(url(Conversation, "change", made.pk)).content.decode()
    assert "<strong>bold</strong>" in html
    assert '<span class="nb">print</span>' in html and "/static/css/code.css" in html
    assert "Raw text · " in html and "Use **bold**:" in html
    assert "<script>alert(1)</script>" not in html


def mcp_server_form(**fields: str) -> dict[str, str]:
    """The MCP server change form as a browser posts it (its read-only tools inline empty)."""
    return {
        "name": "docs",
        "transport": "http",
        "enabled": "on",
        "timeout": "60",
        "url": "",
        "headers": "{}",
        "command": "",
        "args": "[]",
        "env": "{}",
        "tools-TOTAL_FORMS": "0",
        "tools-INITIAL_FORMS": "0",
        "tools-MIN_NUM_FORMS": "0",
        "tools-MAX_NUM_FORMS": "1000",
        **fields,
    }


def stdio_fields() -> dict[str, str]:
    command, *args = STDIO_COMMAND
    return {"transport": "stdio", "command": command, "args": json.dumps(args)}


def test_mcp_server_pages_render_with_tools_variables_and_the_refresh_button(
    staff: Client,
) -> None:
    server = McpServer.objects.create(
        name="docs",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        headers={"Authorization": "AGENTLAB_MCP_KEY_DOCS"},
        status="down",
        error="ConnectError: All connection attempts failed",
    )
    McpTool.objects.create(
        server=server, name="search_docs", exposed_name="docs__search_docs", description="Find."
    )

    listing = staff.get(url(McpServer, "changelist"))
    (row,) = listing.context["cl"].result_list
    assert listing.status_code == 200 and row.n_tools == 1
    assert "ConnectError: All connection attempts failed" in listing.content.decode()
    page = staff.get(url(McpServer, "change", server.pk))
    html = page.content.decode()
    assert page.status_code == 200 and "docs__search_docs" in html
    assert "Authorization ← AGENTLAB_MCP_KEY_DOCS (unset)" in html
    assert 'name="_refresh" value="Check and refresh tools"' in html
    assert staff.get(url(McpServer, "add")).status_code == 200


def test_a_bad_mcp_server_config_shows_each_problem_and_saves_nothing(staff: Client) -> None:
    data = mcp_server_form(url="ftp://example.com/mcp", headers='{"Authorization": "SECRET_KEY"}')

    response = staff.post(url(McpServer, "add"), data)

    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors["url"] == ["an http:// or https:// address is needed."]
    assert "SECRET_KEY is one of the server's own secrets" in form.errors["headers"][0]
    response = staff.post(url(McpServer, "add"), mcp_server_form(headers='["Authorization"]'))
    assert "Enter an object of names" in response.context["adminform"].form.errors["headers"][0]
    assert not McpServer.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_refresh_action_and_button_store_tools_and_mark_a_server_down(
    staff: Client,
) -> None:
    command, *args = STDIO_COMMAND
    local = McpServer.objects.create(name="local", transport="stdio", command=command, args=args)
    gone = McpServer.objects.create(name="gone", transport="stdio", command="/nonexistent/mcp")

    response = staff.post(
        url(McpServer, "changelist"),
        {"action": "check_and_refresh", "_selected_action": [local.pk, gone.pk]},
        follow=True,
    )

    shown = [str(message) for message in response.context["messages"]]
    assert "local is up and lists 20 tool(s)." in shown
    assert any(text.startswith("gone is down: FileNotFoundError") for text in shown)
    assert McpTool.objects.filter(server=local, exposed_name="local__pid").exists()
    gone.refresh_from_db()
    assert gone.status == "down" and "FileNotFoundError" in gone.error

    McpTool.objects.filter(server=local).delete()
    form = mcp_server_form(name="local", timeout="30", _refresh="Check and refresh tools")
    response = staff.post(url(McpServer, "change", local.pk), {**form, **stdio_fields()})

    assert response.status_code == 302
    assert response["Location"] == url(McpServer, "change", local.pk)
    local.refresh_from_db()
    assert local.timeout == 30 and local.status == "up" and local.tools.count() == 20
    page = staff.get(url(McpServer, "change", local.pk)).content.decode()
    assert "local__research_task" in page and "required" in page  # runs only as a task


def test_mcp_tool_calls_show_their_server_and_raw_result(staff: Client, rich: Conversation) -> None:
    call = ToolCall.objects.filter(run__conversation=rich).order_by("pk").first()
    assert call is not None
    raw = {"content": [{"type": "text", "text": "raw-marker"}], "isError": False}
    ToolCall.objects.filter(pk=call.pk).update(server="docs", raw_result=raw)

    page = staff.get(url(ToolCall, "change", call.pk)).content.decode()
    assert "docs" in page and "&quot;raw-marker&quot;" in page and "&quot;isError&quot;" in page
    listing = staff.get(url(ToolCall, "changelist"), {"server": "docs"})
    assert [row.pk for row in listing.context["cl"].result_list] == [call.pk]
    transcript = staff.get(url(Conversation, "change", rich.pk)).content.decode()
    assert transcript.count("on MCP server <code>docs</code>") == 2  # the call, its answer


def test_transcript_draws_each_runs_waterfall_and_says_why_calls_failed(
    staff: Client, rich: Conversation
) -> None:
    ToolCall.objects.filter(call_id="call_b").update(failure="tool_error")

    html = staff.get(url(Conversation, "change", rich.pk)).content.decode()

    first, second = rich.runs.order_by("pk")
    header = html[html.index(f'id="run-{first.pk}"') :]
    header = header[: header.index("</section>")]
    assert '<div class="waterfall-frame"><svg class="waterfall waterfall-wide"' in header
    assert 'role="img" aria-label="Run of 1.50 s: 2 model calls, 2 tool calls (1 failed)"' in header
    assert "step 1 · 10→8 tok" in header and "step 2 · 20→4 tok" in header
    assert 'class="wf-bar wf-tool wf-failed"' in header and "style=" not in header
    assert (
        f'id="run-{second.pk}"' in html and html.count('<svg class="waterfall waterfall-wide"') == 2
    )
    assert (
        '<span class="pill-name">Handoff note</span> <span class="pill-kind">· failed</span></a>'
        in html
    )


# Annotations: listed, filtered, searched and edited by staff with the chat's rules; read-only
# on their run's page.


def annotated(rich: Conversation) -> dict:
    """Three annotations on the rich conversation's first run: ada's Bad on the reply with a
    note, bob's Good on the time call, ada's Bad on the note call with the expected call."""
    from chat.models import Annotation

    first = rich.runs.order_by("pk").first()
    assert first is not None
    time_call, note_call = first.tool_calls.order_by("position")
    bob = make.user("bob")
    return {
        "run": first,
        "time_call": time_call,
        "note_call": note_call,
        "reply": Annotation.objects.create(
            author=rich.owner, run=first, verdict="bad", note="Paris was not asked for."
        ),
        "good": Annotation.objects.create(
            author=bob, run=first, tool_call=time_call, verdict="good"
        ),
        "bad": Annotation.objects.create(
            author=rich.owner,
            run=first,
            tool_call=note_call,
            verdict="bad",
            note="The note was empty.",
            expected={"tool": "handoff_note", "arguments": {"note": "Call Sam at 10:30"}},
        ),
    }


def test_annotations_are_listed_with_their_target_and_filtered(
    staff: Client, rich: Conversation
) -> None:
    from chat.models import Annotation

    rows = annotated(rich)
    listing = staff.get(url(Annotation, "changelist"))
    html = listing.content.decode()
    assert listing.status_code == 200
    for text in (
        "Paris was not asked for.",
        "— (the reply)",
        "handoff_note {&quot;note&quot;: &quot;Call Sam at 10:30&quot;}",
        "get_current_time",
        url(Conversation, "change", rich.pk),
    ):
        assert text in html, text

    def listed(**query: str) -> set[object]:
        response = staff.get(url(Annotation, "changelist"), query)
        assert response.status_code == 200
        return {row.pk for row in response.context["cl"].result_list}

    reply, good, bad = (rows[key].pk for key in ("reply", "good", "bad"))
    bob = get_user_model().objects.get(username="bob")
    assert listed(verdict__exact="bad") == {reply, bad}
    assert listed(author__id__exact=str(bob.pk)) == {good}
    assert listed(expected="call") == {bad}
    assert listed(expected="none") == {reply, good}
    assert listed(on="reply") == {reply}
    assert listed(on="tool_call") == {good, bad}
    assert listed(q="empty") == {bad}
    assert listed(created_at__gte="2000-01-01 00:00:00+00:00") == {reply, good, bad}


def test_staff_edit_an_annotation_with_the_chats_rules(staff: Client, rich: Conversation) -> None:
    from chat.models import Annotation

    bad = annotated(rich)["bad"]
    page = staff.get(url(Annotation, "change", bad.pk))
    html = page.content.decode()
    assert page.status_code == 200 and 'name="_save"' in html
    assert 'name="expected_tool"' in html and 'value="handoff_note"' in html

    form = {
        "verdict": "bad",
        "note": "Still empty.",
        "expected_tool": "handoff_note",
        "expected_arguments": '{"note": ',
    }
    response = staff.post(url(Annotation, "change", bad.pk), form)
    assert response.status_code == 200
    assert "Expected arguments are not valid JSON" in response.content.decode()
    assert "{&quot;note&quot;: </textarea>" in response.content.decode()
    bad.refresh_from_db()
    assert bad.note == "The note was empty."

    no_tool = {**form, "expected_tool": "", "expected_arguments": "", "no_tool": "on"}
    response = staff.post(url(Annotation, "change", bad.pk), no_tool)
    assert response.status_code == 302
    bad.refresh_from_db()
    assert (bad.note, bad.expected, bad.author) == ("Still empty.", {"no_tool": True}, rich.owner)


def test_staff_add_annotations_as_themselves_once_per_target(
    staff: Client, rich: Conversation
) -> None:
    from chat.models import Annotation

    rows = annotated(rich)
    run, note_call = rows["run"], rows["note_call"]
    add = url(Annotation, "add")
    assert staff.get(add).status_code == 200

    response = staff.post(add, {"run": run.pk, "verdict": "good", "expected_tool": "x"})
    assert "Only a tool call has an expected call" in response.content.decode()
    other = rich.runs.order_by("pk").last()
    assert other is not None and other != run
    response = staff.post(add, {"run": other.pk, "tool_call": note_call.pk, "verdict": "good"})
    assert "This tool call belongs to another run." in response.content.decode()
    assert Annotation.objects.count() == 3

    response = staff.post(add, {"run": run.pk, "tool_call": note_call.pk, "verdict": "good"})
    assert response.status_code == 302
    mine = Annotation.objects.get(author__username="root")
    assert (mine.tool_call, mine.verdict, mine.expected) == (note_call, "good", None)
    response = staff.post(add, {"run": run.pk, "tool_call": note_call.pk, "verdict": "bad"})
    assert "root has already annotated this tool call" in response.content.decode()
    assert Annotation.objects.count() == 4


def test_a_runs_page_lists_its_annotations_read_only(staff: Client, rich: Conversation) -> None:
    from chat.models import Annotation

    rows = annotated(rich)
    html = staff.get(url(Run, "change", rows["run"].pk)).content.decode()
    assert "Paris was not asked for." in html and "The note was empty." in html
    assert "handoff_note {&quot;note&quot;: &quot;Call Sam at 10:30&quot;}" in html
    assert 'name="annotations-0-note"' not in html  # read-only
    assert url(Annotation, "change", rows["reply"].pk) in html


def test_deleting_a_conversation_takes_its_annotations(client: Client, rich: Conversation) -> None:
    from chat.models import Annotation

    annotated(rich)
    viewer = make.user("viewer", is_staff=True)
    viewer.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_conversation", "delete_conversation"])
    )
    client.force_login(viewer)
    confirm = client.get(url(Conversation, "delete", rich.pk))
    assert confirm.status_code == 200 and not confirm.context["perms_lacking"]
    response = client.post(url(Conversation, "delete", rich.pk), {"post": "yes"})
    assert response.status_code == 302 and not Annotation.objects.exists()
    assert client.get(url(Annotation, "changelist")).status_code == 403


def test_conversations_show_and_filter_by_the_agent_they_started_from(staff: Client) -> None:
    owner = make.user("ada")
    kept = make.conversation(owner, "Support as it was", system_prompts=["You help."])
    support = agents.create_agent(name="Support", conversation=kept, user=owner)
    changed = agents.start_conversation(user=owner, version=support.published)
    changed.title = "Support changed"
    changed.set_agent_parameters(changed.agent_parameters().changed(temperature=0.1))
    changed.save()
    default = make.conversation(owner, "On Default")
    version_url = url(agents.AgentVersion, "change", support.published_id)

    def listed(**query: object) -> set[int]:
        response = staff.get(url(Conversation, "changelist"), query)
        assert response.status_code == 200
        return {row.pk for row in response.context["cl"].result_list}

    assert listed(agent=support.pk) == {kept.pk, changed.pk}
    assert listed(agent="default") == {default.pk}
    listing = staff.get(url(Conversation, "changelist")).content.decode()
    assert f'<a href="{version_url}">Support v1</a> (changed since)' in listing
    assert "?agent=default" in listing and f"?agent={support.pk}" in listing
    page = staff.get(url(Conversation, "change", kept.pk)).content.decode()
    assert f'<a href="{version_url}">Support v1</a>' in page
    assert "(changed since)" not in page
    with CaptureQueriesContext(connection) as few:
        staff.get(url(Conversation, "changelist"))
    for number in range(3):
        agents.start_conversation(user=owner, version=support.published)
        make.conversation(owner, f"more {number}")
    with CaptureQueriesContext(connection) as more:
        staff.get(url(Conversation, "changelist"))
    assert len(more) == len(few)
