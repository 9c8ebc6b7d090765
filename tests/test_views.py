from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import AsyncClient, Client
from django.urls import reverse

from chat import agent
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.models import Conversation, Message
from chat.testing import factories as make

pytestmark = pytest.mark.django_db(transaction=True)


def test_pages_require_login(user: Any) -> None:
    conversation = make.new_conversation(user)
    anonymous = Client()
    for url in [
        reverse("chat:conversation_list"),
        reverse("chat:conversation_detail", args=[conversation.pk]),
        reverse("chat:conversation_settings", args=[conversation.pk]),
    ]:
        response = anonymous.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]
    assert anonymous.post(reverse("chat:conversation_create")).status_code == 302
    assert Conversation.objects.count() == 1


def test_another_users_conversation_is_a_404(client_in: Client) -> None:
    other = get_user_model().objects.create_user("mallory", password="pw-123456789")
    theirs = make.new_conversation(other, title="secret plans")
    for name in ["conversation_detail", "conversation_settings"]:
        response = client_in.get(reverse(f"chat:{name}", args=[theirs.pk]))
        assert response.status_code == 404
    for name in ["conversation_rename", "conversation_delete"]:
        response = client_in.post(reverse(f"chat:{name}", args=[theirs.pk]), {"title": "mine"})
        assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.title == "secret plans"
    assert "secret plans" not in client_in.get(reverse("chat:conversation_list")).content.decode()


def test_reload_shows_the_pills_from_the_database(client_in: Client, user: Any) -> None:
    conversation = make.new_conversation(user, tool_policies={"handoff_note": "run"})
    make.run_turn(conversation, "time and a handoff note please", ScriptedChatClient())
    make.run_turn(conversation, "hello", ScriptedChatClient(["Plain answer."]))

    page = client_in.get(reverse("chat:conversation_detail", args=[conversation.pk]))
    html = page.content.decode()
    assert page.status_code == 200
    assert html.count('class="pills"') == 1
    assert 'class="pill pill-completed"' in html
    assert "Get current time" in html and "Handoff note" in html
    assert "Plain answer." in html
    assert "Scripted model (offline)" in html
    assert f'ws-connect="/ws/conversations/{conversation.pk}/"' in html


def test_page_sends_a_content_security_policy(client_in: Client, user: Any) -> None:
    conversation = make.new_conversation(user)
    response = client_in.get(reverse("chat:conversation_detail", args=[conversation.pk]))
    policy = response["Content-Security-Policy"]
    assert "script-src 'self' 'nonce-" in policy and "object-src 'none'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


def test_create_rename_and_delete(client_in: Client, user: Any) -> None:
    response = client_in.post(reverse("chat:conversation_create"))
    conversation = Conversation.objects.get()
    assert response["Location"] == reverse("chat:conversation_detail", args=[conversation.pk])
    assert set(conversation.agent_parameters().enabled_tools) >= {"get_current_time"}

    client_in.post(
        reverse("chat:conversation_rename", args=[conversation.pk]), {"title": " New  name "}
    )
    conversation.refresh_from_db()
    assert conversation.title == "New name"

    response = client_in.post(reverse("chat:conversation_delete", args=[conversation.pk]))
    assert response.status_code == 302 and not Conversation.objects.exists()


def test_list_redirects_to_the_newest_conversation(client_in: Client, user: Any) -> None:
    first = client_in.get(reverse("chat:conversation_list")).content.decode()
    assert '<form id="composer"' in first and 'name="message"' in first
    make.new_conversation(user, title="old")
    newest = make.new_conversation(user, title="new")
    response = client_in.get(reverse("chat:conversation_list"))
    assert response["Location"] == reverse("chat:conversation_detail", args=[newest.pk])


def test_settings_are_saved(client_in: Client, user: Any) -> None:
    conversation = make.new_conversation(user)
    url = reverse("chat:conversation_settings", args=[conversation.pk])
    assert client_in.get(url).status_code == 200
    response = client_in.post(url, make.settings_form())
    assert response.status_code == 302
    conversation.refresh_from_db()
    parameters = conversation.agent_parameters()
    assert parameters.temperature == 0.5 and parameters.max_event_loops == 4
    assert parameters.enabled_tools == ("handoff_note",)
    assert parameters.system_prompts == ("Be brief.",)
    assert [(m.role, m.content) for m in parameters.pre_messages] == [
        ("assistant", "How can I help?")
    ]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"pre-0-role": "tool"}, "Select a valid choice. tool is not one of the available"),
        ({"agent-temperature": "3"}, "less than or equal to 2"),
        ({"agent-max_event_loops": "0"}, "greater than or equal to 1"),
        ({"agent-max_event_loops": "51"}, "less than or equal to 50"),
        ({"agent-enabled_tools": ["rm_rf"]}, "Select a valid choice"),
        ({"agent-max_tokens": "-5"}, "greater than or equal to 1"),
        # A tampered formset count: shown, and never more forms built than the page offers.
        ({"system-TOTAL_FORMS": "100000"}, "Please submit at most 20 forms."),
        ({"system-TOTAL_FORMS": "21"}, "Please submit at most 20 forms."),
        ({"pre-TOTAL_FORMS": "100000"}, "Please submit at most 50 forms."),
        ({"pre-TOTAL_FORMS": "many"}, "ManagementForm data is missing or has been tampered with"),
    ],
)
def test_invalid_settings_show_inline_and_save_nothing(
    client_in: Client, user: Any, overrides: dict[str, Any], expected: str
) -> None:
    conversation = make.new_conversation(user)
    before = conversation.parameters
    url = reverse("chat:conversation_settings", args=[conversation.pk])
    response = client_in.post(url, make.settings_form(**overrides), headers={"HX-Request": "true"})
    assert response.status_code == 422
    html = response.content.decode()
    assert expected in html and 'class="field-error"' in html
    assert "<html" not in html
    assert html.count('<textarea name="system-') <= 20
    assert html.count('<textarea name="pre-') <= 50
    conversation.refresh_from_db()
    assert conversation.parameters == before


def test_no_api_key_reaches_the_page(client_in: Client, user: Any, settings: Any) -> None:
    settings.OPENAI_API_KEY = "sk-very-secret-key"
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    settings.AGENTLAB_MODEL = "m-1"
    conversation = make.new_conversation(user)
    for url in [
        reverse("chat:conversation_detail", args=[conversation.pk]),
        reverse("chat:conversation_settings", args=[conversation.pk]),
    ]:
        html = client_in.get(url).content.decode()
        assert "sk-very-secret-key" not in html
    assert (
        "m-1"
        in client_in.get(
            reverse("chat:conversation_detail", args=[conversation.pk])
        ).content.decode()
    )


def test_a_huge_message_is_folded_and_its_whole_text_one_link_away(
    client_in: Client, user: Any
) -> None:
    conversation = make.new_conversation(user)
    huge = "word " * 1_000_000
    for index, (role, content) in enumerate(
        [
            ("user", "<b>bold?</b> " + huge),
            ("assistant", "Short answer."),
            ("assistant", "<script>alert(1)</script> " + huge),
        ]
    ):
        Message.objects.create(conversation=conversation, index=index, role=role, content=content)

    page = client_in.get(reverse("chat:conversation_detail", args=[conversation.pk]))

    html = page.content.decode()
    assert page.status_code == 200 and len(page.content) < 300_000
    assert "&lt;b&gt;bold?&lt;/b&gt; word word" in html and "<b>bold" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    assert "Short answer." in html
    links = [reverse("chat:message_text", args=[conversation.pk, index]) for index in (0, 1, 2)]
    assert f'href="{links[0]}"' in html and f'href="{links[2]}"' in html
    assert f'href="{links[1]}"' not in html
    assert html.count("read all 5,000,013 characters") == 1
    assert html.count("read all 5,000,026 characters") == 1
    whole = client_in.get(links[2])
    assert whole["Content-Type"] == "text/plain; charset=utf-8"
    assert whole["X-Content-Type-Options"] == "nosniff"
    assert whole.content.decode() == "<script>alert(1)</script> " + huge
    other = Client()
    other.force_login(get_user_model().objects.create_user("mallory", password="pw-123456789"))
    assert other.get(links[2]).status_code == 404


def test_fork_links_use_an_inline_svg_icon_and_only_staff_see_the_admin_link(
    client_in: Client, user: Any
) -> None:
    """The "⑂" glyph rendered as an empty box in Debian's chromium."""
    conversation = make.new_conversation(user)
    make.run_turn(conversation, "hello")
    html = client_in.get(reverse("chat:conversation_detail", args=[conversation.pk])).content
    page = html.decode()
    assert "⑂" not in page
    assert page.count('<svg class="icon"') >= 2 and 'aria-hidden="true"' in page
    assert "Admin transcript" not in page


async def test_the_first_message_makes_the_conversation_and_starts_its_run(user: Any) -> None:
    """No extra click: the first screen's composer creates the conversation and sends."""
    client = AsyncClient()
    await client.aforce_login(user)

    response = await client.post(reverse("chat:conversation_create"), {"message": "hello"})

    conversation = await Conversation.objects.aget(owner=user)
    assert response.status_code == 302
    assert response["Location"] == reverse("chat:conversation_detail", args=[conversation.pk])
    run = await conversation.runs.aget()
    async with asyncio.timeout(10):
        while run.status == "in_progress":
            await asyncio.sleep(0.02)
            await run.arefresh_from_db()
    assert run.status == "completed"
    assert conversation.title == "hello"
    assert (await conversation.messages.afirst()).content == "hello"


@pytest.mark.parametrize(("message", "reason"), [("   ", "empty"), ("x" * 40_000, "too long")])
async def test_a_first_message_that_cannot_be_sent_comes_back_and_makes_nothing(
    user: Any, message: str, reason: str
) -> None:
    client = AsyncClient()
    await client.aforce_login(user)

    response = await client.post(reverse("chat:conversation_create"), {"message": message})

    assert response.status_code == 422
    page = response.content.decode()
    assert reason in page and 'role="alert"' in page
    assert message.strip()[:100] in page  # what was typed is kept
    assert not await Conversation.objects.filter(owner=user).aexists()


def test_copy_and_edit_read_the_raw_text_of_the_active_path(client_in: Client, user: Any) -> None:
    conversation = make.new_conversation(user)
    make.run_turn(conversation, "a *question*", ScriptedChatClient(["**bold** answer"]))
    make.run_turn(conversation, None, ScriptedChatClient(["`new` answer"]), version_from=0)

    def text(name: str, index: int) -> Any:
        return client_in.get(reverse(f"chat:{name}", args=[conversation.pk, index]))

    assert text("message_text", 0).content.decode() == "a *question*"
    reply = text("reply_text", 1)
    assert reply["Content-Type"] == "text/plain; charset=utf-8"
    assert reply.content.decode() == "`new` answer"
    assert text("reply_text", 0).status_code == 404  # a question is not a reply
    assert text("reply_text", 7).status_code == 404
    other = Client()
    other.force_login(get_user_model().objects.create_user("mallory", password="pw-12345678"))
    response = other.get(reverse("chat:reply_text", args=[conversation.pk, 1]))
    assert response.status_code == 404

    page = client_in.get(reverse("chat:conversation_detail", args=[conversation.pk]))
    html = page.content.decode()
    assert "version 2 of 2" in html and "**bold**" not in html and "bold" not in html
    for name in ["Edit message", "Copy message", "Regenerate reply", "Previous version"]:
        assert f'aria-label="{name}"' in html
    assert 'aria-label="Next version" disabled data-end' in html


def test_a_pill_opens_its_calls_details(client_in: Client, user: Any) -> None:
    conversation = make.new_conversation(user)
    make.run_turn(conversation, "what time is it?", ScriptedChatClient())
    call = conversation.runs.get().tool_calls.get()

    html = client_in.get(reverse("chat:conversation_detail", args=[conversation.pk])).content
    url = reverse("chat:tool_call_detail", args=[conversation.pk, call.pk])
    assert f'hx-get="{url}"'.encode() in html and b'aria-expanded="false"' in html

    detail = client_in.get(url).content.decode()
    assert "<code>get_current_time</code>" in detail and "Completed" in detail
    assert "Arguments" in detail and "Result" in detail and "iso" in detail
    call.status, call.error = "failed", "the clock is gone"
    call.save()
    assert "Why it failed: the clock is gone" in client_in.get(url).content.decode()

    other = Client()
    other.force_login(get_user_model().objects.create_user("mallory", password="pw-12345678"))
    assert other.get(url).status_code == 404


def test_add_and_remove_rows_in_place_and_save_nothing_until_save(
    client_in: Client, user: Any
) -> None:
    conversation = make.conversation(user, "rows", system_prompts=["One", "Two", "Three"])
    url = reverse("chat:conversation_settings", args=[conversation.pk])
    shown = client_in.get(url).content.decode()
    assert shown.count('<textarea name="system-') == 3, "no blank row next to existing ones"
    assert 'aria-label="Remove system prompt 2"' in shown and ">Add system prompt</button>" in shown
    htmx = {"HX-Request": "true"}
    rows = {
        "system-TOTAL_FORMS": "3",
        "system-INITIAL_FORMS": "3",
        "system-0-content": "One",
        "system-1-content": "Two",
        "system-2-content": "Three",
        "pre-TOTAL_FORMS": "0",
        "pre-INITIAL_FORMS": "0",
    }

    added = client_in.post(url, make.settings_form(**rows, add="system"), headers=htmx)
    assert added.status_code == 200
    html = added.content.decode()
    assert html.count('<textarea name="system-') == 4
    assert re.search(r'<textarea name="system-3-content"[^>]*autofocus', html)
    assert 'name="system-TOTAL_FORMS" value="4"' in html

    removed = client_in.post(url, make.settings_form(**rows, remove="system-0"), headers=htmx)
    html = removed.content.decode()
    assert removed.status_code == 200
    assert re.findall(r'<textarea name="system-\d-content"[^>]*>\n?([^<]*)</textarea>', html) == [
        "Two",
        "Three",
    ]
    assert re.search(r'hx-vals=\'{"add": "system"}\' autofocus', html)
    conversation.refresh_from_db()
    assert conversation.agent_parameters().system_prompts == ("One", "Two", "Three")

    kept = {**rows, "system-TOTAL_FORMS": "2", "system-0-content": "Two", "system-1-content": "3"}
    del kept["system-2-content"]
    assert client_in.post(url, make.settings_form(**kept), headers=htmx).status_code == 200
    conversation.refresh_from_db()
    assert conversation.agent_parameters().system_prompts == ("Two", "3")


def test_saved_is_said_next_to_the_save_button(client_in: Client, user: Any) -> None:
    conversation = make.new_conversation(user)
    url = reverse("chat:conversation_settings", args=[conversation.pk])
    page = client_in.get(url).content.decode()
    actions = re.search(r'<div class="actions settings-actions">(.*?)</div>', page, re.DOTALL)
    assert actions is not None
    assert re.search(
        r'<button type="submit" form="settings-panel" class="primary">Save settings</button>\s*'
        r'<p id="settings-status" class="save-status" role="status"></p>',
        actions.group(1),
    )

    html = client_in.post(
        url, make.settings_form(), headers={"HX-Request": "true"}
    ).content.decode()
    panel, _, status = html.partition("</form>")
    assert "Saved" not in panel
    assert re.search(
        r'<span id="settings-status" hx-swap-oob="innerHTML">'
        r'<span class="saved"><svg[^>]*>.*?</svg>Saved\. ',
        status,
    )
    failed = client_in.post(
        url, make.settings_form(**{"agent-temperature": "9"}), headers={"HX-Request": "true"}
    ).content.decode()
    assert "Not saved: see the fields marked above." in failed.partition("</form>")[2]


def test_failed_pills_say_why_the_call_failed(client_in: Client, user: Any) -> None:
    conversation = make.conversation(user, enabled_tools=["search_cards", "get_current_time"])
    asked = (
        agent.ToolCall(id="c1", name="search_cards", arguments='{"limit": 99}'),
        agent.ToolCall(id="c2", name="launch_rockets", arguments="{}"),
        agent.ToolCall(id="c3", name="handoff_note", arguments='{"note": "hi"}'),
        agent.ToolCall(id="c4", name="get_current_time", arguments="{not json"),
        agent.ToolCall(id="c5", name="get_current_time", arguments="{}"),
    )
    turns = [ScriptedTurn(tool_calls=asked), ScriptedTurn(text="Some of that did not work.")]
    make.run_turn(conversation, "do it all", ScriptedChatClient(turns))
    failures = dict(conversation.runs.get().tool_calls.values_list("call_id", "failure"))
    assert failures == {
        "c1": "invalid_arguments",
        "c2": "unknown_tool",
        "c3": "not_enabled",
        "c4": "invalid_arguments",
        "c5": "",
    }

    html = client_in.get(reverse("chat:conversation_detail", args=[conversation.pk])).content
    buttons = re.findall(
        r'<button type="button" class="(pill [^"]*)"[^>]*data-tool-pill>(.*?)</button>',
        html.decode(),
    )
    assert [(css, re.sub(r"<[^>]+>", "", text)) for css, text in buttons] == [
        ("pill pill-failed pill-invalid_arguments", "Search cards · invalid arguments"),
        ("pill pill-failed pill-unknown_tool", "Launch rockets · unknown tool"),
        ("pill pill-failed pill-not_enabled", "Handoff note · not enabled"),
        ("pill pill-failed pill-invalid_arguments", "Get current time · invalid arguments"),
        ("pill pill-completed", "Get current time"),
    ]

    call = conversation.runs.get().tool_calls.get(call_id="c2")
    detail = client_in.get(reverse("chat:tool_call_detail", args=[conversation.pk, call.pk]))
    assert '<span class="pill-kind">· unknown tool</span>' in detail.content.decode()
