"""Tests of chat.transcripts.forks: copies up to a message, edited tool results, the fork
pages and command."""

from __future__ import annotations

import asyncio
import json
from io import StringIO
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.template.loader import render_to_string
from django.test import AsyncClient, Client
from django.urls import reverse
from django.utils.html import escape

from chat import agents, runs, transcripts
from chat.agent import history
from chat.agent.scripted import ScriptedChatClient
from chat.models import Conversation, Message, ModelCall, Run, RunStatus, ToolCall
from chat.runs import lifecycle
from chat.testing import factories as make
from chat.transcripts import forks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def scripted_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run started without a client (views, the command) gets the default script."""
    monkeypatch.setattr(lifecycle, "build_client", lambda *_, **__: ScriptedChatClient())


@pytest.fixture
def parent(user: Any) -> Conversation:
    """0 user, 1 assistant asks call_1, 2 tool, 3 assistant; 4 user, 5 assistant asks call_2 and
    call_3, 6 and 7 tool, 8 assistant."""
    conversation = make.new_conversation(user, "Times", tool_policies={"handoff_note": "run"})
    make.run_turn(conversation, "what time is it?", ScriptedChatClient())
    make.run_turn(conversation, "the time and a handoff note please", ScriptedChatClient())
    return conversation


def snapshot(conversation: Conversation) -> list[tuple[Any, ...]]:
    rows = conversation.messages.order_by("index").values_list(
        "index", "role", "content", "tool_calls", "tool_call_id", "run_id"
    )
    logs = ToolCall.objects.filter(run__conversation=conversation).values_list(
        "pk", "status", "result", "error", "message_id"
    )
    return [*rows, *logs]


def roles(conversation: Conversation) -> list[str]:
    return list(conversation.messages.order_by("index").values_list("role", flat=True))


def assert_valid(*conversations: Conversation) -> None:
    for conversation in conversations:
        assert history.validate(transcripts.load_history(conversation)) == [], conversation


def fork_and_continue(parent: Conversation, **options: Any) -> tuple[Conversation, Run]:
    fork = forks.fork_conversation(parent, owner=parent.owner, **options)

    async def go() -> Run:
        handle = await runs.start_run(conversation=fork, user=fork.owner, content=None)
        return await handle.task

    run = asyncio.run(go())
    run.refresh_from_db()
    return fork, run


def test_the_parent_is_what_the_tests_expect(parent: Conversation) -> None:
    assert roles(parent) == [
        *("user", "assistant", "tool", "assistant"),
        *("user", "assistant", "tool", "tool", "assistant"),
    ]
    assert parent.messages.get(index=5).tool_calls[1]["id"] == "call_3"


def test_a_fork_title_keeps_the_title_first_and_says_fork_once(parent: Conversation) -> None:
    """The mark goes last, so a sidebar that cuts long titles still shows the title."""
    fork = forks.fork_conversation(parent, owner=parent.owner, at_message=3)
    again = forks.fork_conversation(fork, owner=parent.owner, at_message=3)
    assert (fork.title, again.title) == ("Times (fork)", "Times (fork)")

    parent.title = "x" * 200
    parent.save(update_fields=["title"])
    long = forks.fork_conversation(parent, owner=parent.owner, at_message=3)
    assert len(long.title) == 200 and long.title.endswith("xx (fork)")
    untitled = Conversation.objects.create(owner=parent.owner)
    assert forks.fork_title(untitled) == f"Conversation {untitled.pk} (fork)"


def test_fork_at_a_user_message(parent: Conversation) -> None:
    before = snapshot(parent)
    fork = forks.fork_conversation(parent, owner=parent.owner, at_message=4)

    assert fork.parent == parent and fork.forked_at == 4 and fork.owner == parent.owner
    assert fork.title == "Times (fork)"
    assert fork.parameters == parent.parameters and fork.profile_id == parent.profile_id
    assert roles(fork) == ["user", "assistant", "tool", "assistant", "user"]
    assert list(fork.messages.values_list("index", flat=True)) == [0, 1, 2, 3, 4]
    copied = fork.messages.get(index=1)
    original = parent.messages.get(index=1)
    assert (copied.content, copied.reasoning, copied.tool_calls) == (
        original.content,
        original.reasoning,
        original.tool_calls,
    )
    # The first run is copied whole; the second answered nothing that was copied.
    (run,) = fork.runs.all()
    first = parent.runs.order_by("pk").first()
    assert (run.status, run.steps, run.total_tokens) == (
        first.status,
        first.steps,
        first.total_tokens,
    )
    assert fork.messages.get(index=4).run is None
    assert run.model_calls.count() == first.model_calls.count() == 2
    (log,) = ToolCall.objects.filter(run__conversation=fork)
    assert log.message == copied and log.name == "get_current_time" and log.status == "completed"
    assert snapshot(parent) == before
    assert_valid(parent, fork)
    assert list(parent.forks.all()) == [fork]


def test_fork_at_the_final_answer_copies_the_turn_whole(parent: Conversation) -> None:
    fork = forks.fork_conversation(parent, owner=parent.owner, at_message=3)
    assert roles(fork) == ["user", "assistant", "tool", "assistant"]
    assert fork.forked_at == 3
    assert_valid(fork)


@pytest.mark.parametrize("at", [5, 6, 7])
def test_a_fork_inside_a_tool_round_copies_the_round_whole(parent: Conversation, at: int) -> None:
    fork = forks.fork_conversation(parent, owner=parent.owner, at_message=at)

    assert fork.forked_at == 7
    assert roles(fork)[-3:] == ["assistant", "tool", "tool"]
    second = parent.runs.order_by("pk").last()
    copy = fork.runs.order_by("pk").last()
    assert copy.messages.count() == 4
    # Cut short after its first model turn: that step's logs, its usage, no whole-run duration.
    assert copy.steps == 1 and second.steps == 2
    assert list(copy.model_calls.values_list("step", flat=True)) == [1]
    step_one = second.model_calls.get(step=1)
    assert copy.total_tokens == step_one.total_tokens and copy.duration is None
    names = list(copy.tool_calls.order_by("position").values_list("name", flat=True))
    assert names == ["get_current_time", "handoff_note"]
    assert {log.message.conversation_id for log in copy.tool_calls.all()} == {fork.pk}
    assert_valid(parent, fork)


def test_tool_fork_with_an_edited_result_continues_from_it(parent: Conversation) -> None:
    before = snapshot(parent)
    fork, run = fork_and_continue(
        parent, at_message=2, tool_call_id="call_1", tool_result="EDITED-RESULT"
    )

    assert run.status == "completed", run.error
    assert run.conversation == fork
    assert roles(fork) == ["user", "assistant", "tool", "assistant"]
    assert fork.messages.get(index=2).content == "EDITED-RESULT"
    reply = fork.messages.get(index=3)
    assert reply.run == run and "Get current time: EDITED-RESULT" in reply.content
    edited = ToolCall.objects.get(run__conversation=fork, call_id="call_1")
    assert (edited.status, edited.result) == ("completed", "EDITED-RESULT")
    assert edited.error == forks.EDITED_MARK
    assert fork.runs.count() == 2 and ModelCall.objects.filter(run=run).count() == 1
    assert snapshot(parent) == before
    assert "EDITED" not in parent.messages.get(index=2).content
    assert_valid(parent, fork)


def test_tool_fork_marked_failed(parent: Conversation) -> None:
    fork, run = fork_and_continue(parent, at_message=1, tool_call_id="call_1", tool_failed=True)
    assert run.status == "completed"

    assert json.loads(fork.messages.get(index=2).content) == {"error": "marked failed by the user"}
    assert "Get current time failed: marked failed by the user" in fork.messages.last().content
    log = ToolCall.objects.get(run__conversation=fork, call_id="call_1")
    assert log.status == "failed" and "marked failed by the user in this fork" in log.error
    assert_valid(parent, fork)


def test_tool_fork_failed_with_a_reason(parent: Conversation) -> None:
    fork, _ = fork_and_continue(
        parent, at_message=2, tool_call_id="call_1", tool_failed=True, tool_result="clock broke"
    )
    assert json.loads(fork.messages.get(index=2).content) == {"error": "clock broke"}
    assert "failed: clock broke" in fork.messages.last().content


def test_tool_fork_in_a_round_of_two_edits_one_reply(parent: Conversation) -> None:
    other = parent.messages.get(index=6).content
    fork, run = fork_and_continue(
        parent, at_message=7, tool_call_id="call_3", tool_result="NOTE-EDITED"
    )

    assert fork.forked_at == 7 and run.status == "completed"
    assert fork.messages.get(index=6).content == other
    assert fork.messages.get(index=7).content == "NOTE-EDITED"
    assert "Handoff note: NOTE-EDITED" in fork.messages.last().content
    assert_valid(fork)


def test_a_tool_fork_after_the_round_uses_the_round_just_before(parent: Conversation) -> None:
    fork = forks.fork_conversation(
        parent, owner=parent.owner, at_message=3, tool_call_id="call_1", tool_result="x"
    )
    assert fork.forked_at == 2 and roles(fork)[-1] == "tool"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"at_message": 9}, "Message 9 is out of range: this conversation has messages 0 to 8"),
        ({"at_message": 2, "tool_call_id": "nope", "tool_result": "x"}, "no tool call 'nope'"),
        ({"at_message": 1, "tool_call_id": "call_2", "tool_result": "x"}, "comes after message"),
        ({"at_message": 2, "tool_result": "x"}, "Name the tool call"),
        (
            {"at_message": 2, "tool_call_id": "call_1", "tool_result": "x" * 100_001},
            "too long: 100,001 characters",
        ),
    ],
)
def test_refusals_write_nothing(
    parent: Conversation, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        forks.fork_conversation(parent, owner=parent.owner, **options)
    assert Conversation.objects.count() == 1


def test_refused_while_a_run_is_in_progress(parent: Conversation) -> None:
    Run.objects.create(conversation=parent, status=RunStatus.IN_PROGRESS)
    with pytest.raises(forks.RunInProgress, match="run is in progress"):
        forks.fork_conversation(parent, owner=parent.owner, at_message=3)
    assert Conversation.objects.count() == 1


def test_fork_links_partial(parent: Conversation) -> None:
    fork = forks.fork_conversation(parent, owner=parent.owner, at_message=3)
    fork_html = render_to_string("chat/fork_links.html", {"conversation": fork})
    parent_html = render_to_string("chat/fork_links.html", {"conversation": parent})

    detail = reverse("chat:conversation_detail", args=[parent.pk])
    assert f'Forked from <a href="{detail}">Times</a> after message 3' in fork_html
    assert reverse("chat:conversation_detail", args=[fork.pk]) in parent_html
    assert "Forks:" in parent_html and "Times (fork)" in parent_html
    lone = Conversation.objects.create(owner=parent.owner)
    assert render_to_string("chat/fork_links.html", {"conversation": lone}).strip() == ""
    parent.delete()
    fork.refresh_from_db()
    assert "deleted" in render_to_string("chat/fork_links.html", {"conversation": fork})


def test_admin_links_parent_and_forks(parent: Conversation) -> None:
    fork = forks.fork_conversation(parent, owner=parent.owner, at_message=3)
    staff = Client()
    staff.force_login(
        get_user_model().objects.create_user("root", is_staff=True, is_superuser=True)
    )
    fork_page = staff.get(reverse("admin:chat_conversation_change", args=[fork.pk])).content
    parent_page = staff.get(reverse("admin:chat_conversation_change", args=[parent.pk])).content

    parent_url = reverse("admin:chat_conversation_change", args=[parent.pk])
    fork_url = reverse("admin:chat_conversation_change", args=[fork.pk])
    assert b"Forked from" in fork_page and parent_url.encode() in fork_page
    assert b"Forks" in parent_page and fork_url.encode() in parent_page


# Views


def message_url(conversation: Conversation, index: int) -> str:
    return reverse("chat:fork_message", args=[conversation.pk, index])


def tool_url(conversation: Conversation, call_id: str) -> str:
    log = ToolCall.objects.get(run__conversation=conversation, call_id=call_id)
    return reverse("chat:fork_tool_call", args=[conversation.pk, log.pk])


def test_fork_message_page_and_post(client_in: Client, parent: Conversation) -> None:
    page = client_in.get(message_url(parent, 5))
    html = page.content.decode()
    assert page.status_code == 200
    assert "through message 7" in html and "part of a tool round" in html
    assert "reply of Handoff note" in html and 'name="csrfmiddlewaretoken"' in html

    response = client_in.post(message_url(parent, 5))
    fork = Conversation.objects.get(parent=parent)
    assert response.status_code == 302
    assert response["Location"] == reverse("chat:conversation_detail", args=[fork.pk])
    assert fork.forked_at == 7 and not fork.runs.filter(status="in_progress").exists()
    assert client_in.get(response["Location"]).status_code == 200


def test_fork_message_unknown_index_is_a_404(client_in: Client, parent: Conversation) -> None:
    assert client_in.get(message_url(parent, 99)).status_code == 404
    assert client_in.post(message_url(parent, 99)).status_code == 404


def test_fork_tool_call_page(client_in: Client, parent: Conversation) -> None:
    page = client_in.get(tool_url(parent, "call_1"))
    html = page.content.decode()
    assert page.status_code == 200
    assert "Get current time" in html and "get_current_time" in html
    current = parent.messages.get(index=2).content
    assert 'name="result"' in html and 'name="failed"' in html and "Fork and continue" in html
    assert escape(current) in html


async def test_fork_tool_call_post_continues_in_the_fork(user: Any, parent: Conversation) -> None:
    client = AsyncClient()
    await client.aforce_login(user)
    url = await database_sync_to_async(tool_url)(parent, "call_1")
    response = await client.post(url, {"result": "EDITED-RESULT"})

    fork = await Conversation.objects.aget(parent=parent)
    assert response.status_code == 302
    assert response["Location"] == reverse("chat:conversation_detail", args=[fork.pk])
    run = await fork.runs.order_by("-pk").afirst()
    await wait_for_run(run)
    last = await fork.messages.order_by("-index").afirst()
    assert run.status == "completed" and "EDITED-RESULT" in last.content
    await database_sync_to_async(assert_valid)(parent, fork)


async def wait_for_run(run: Run) -> None:
    for _ in range(200):
        await run.arefresh_from_db()
        if run.status != RunStatus.IN_PROGRESS:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the run did not finish")


async def test_fork_tool_call_post_marked_failed(user: Any, parent: Conversation) -> None:
    client = AsyncClient()
    await client.aforce_login(user)
    url = await database_sync_to_async(tool_url)(parent, "call_1")
    current = (await parent.messages.aget(index=2)).content
    # The prefilled text unchanged plus "Mark as failed": a plain failure.
    await client.post(url, {"result": current.replace("\n", "\r\n"), "failed": "on"})

    fork = await Conversation.objects.aget(parent=parent)
    await wait_for_run(await fork.runs.order_by("-pk").afirst())
    reply = await fork.messages.aget(index=2)
    assert json.loads(reply.content) == {"error": "marked failed by the user"}


def test_fork_tool_call_result_too_long(client_in: Client, parent: Conversation) -> None:
    response = client_in.post(tool_url(parent, "call_1"), {"result": "x" * 100_001})
    assert response.status_code == 422
    assert "too long: 100001 characters" in response.content.decode()
    assert Conversation.objects.count() == 1


def test_views_refuse_while_a_run_is_in_progress(client_in: Client, parent: Conversation) -> None:
    Run.objects.create(conversation=parent, status=RunStatus.IN_PROGRESS)
    page = client_in.get(message_url(parent, 3)).content.decode()
    assert "A run is in progress" in page and 'id="fork-submit" disabled' in page

    for url, data in [
        (message_url(parent, 3), {}),
        (tool_url(parent, "call_1"), {"result": "x"}),
    ]:
        response = client_in.post(url, data)
        assert response.status_code == 409
        assert "A run is in progress in this conversation" in response.content.decode()
    assert Conversation.objects.count() == 1


def test_another_users_conversation_is_a_404(parent: Conversation) -> None:
    mallory = Client()
    mallory.force_login(get_user_model().objects.create_user("mallory", password="pw-123456789"))
    for url in [message_url(parent, 3), tool_url(parent, "call_1")]:
        assert mallory.get(url).status_code == 404
        assert mallory.post(url, {"result": "x"}).status_code == 404
    assert Conversation.objects.count() == 1


def test_a_tool_call_of_another_conversation_is_a_404(
    client_in: Client, parent: Conversation, user: Any
) -> None:
    other = Conversation.objects.create(owner=user)
    log = ToolCall.objects.get(run__conversation=parent, call_id="call_1")
    url = reverse("chat:fork_tool_call", args=[other.pk, log.pk])
    assert client_in.get(url).status_code == 404


def test_views_need_login_and_csrf(user: Any, parent: Conversation) -> None:
    anonymous = Client()
    for url in [message_url(parent, 3), tool_url(parent, "call_1")]:
        response = anonymous.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    for url in [message_url(parent, 3), tool_url(parent, "call_1")]:
        assert strict.post(url, {"result": "x"}).status_code == 403
    assert Conversation.objects.count() == 1


# The command


def fork_command(*args: str) -> str:
    out = StringIO()
    call_command("fork", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_command_edits_a_tool_result_and_continues(parent: Conversation) -> None:
    out = fork_command(str(parent.pk), "--at-message", "2", "--tool-result", "CLI-EDIT")

    fork = Conversation.objects.get(parent=parent)
    assert f"Forked conversation {parent.pk} into {fork.pk}" in out
    assert "Here is what the tools said" in out and "CLI-EDIT" in out
    assert "completed" in out
    assert fork.messages.get(index=2).content == "CLI-EDIT"
    assert_valid(parent, fork)


def test_command_json_and_implied_call_before_the_message(parent: Conversation) -> None:
    out = fork_command(str(parent.pk), "--at-message", "3", "--tool-failed", "--json")

    data = json.loads(out)
    fork = Conversation.objects.get(pk=data["conversation"])
    assert data["parent"] == parent.pk and data["forked_at"] == 2
    assert data["edited_tool_call"] == "call_1" and data["messages"] == 3
    assert data["run"]["status"] == "completed"
    assert "failed: marked failed by the user" in data["run"]["text"]
    assert_valid(fork)


def test_command_fork_without_an_edit_does_not_run(parent: Conversation) -> None:
    data = json.loads(fork_command(str(parent.pk), "--at-message", "4", "--json"))
    assert data["run"] is None and data["forked_at"] == 4
    assert data["edited_tool_call"] is None
    assert Run.objects.filter(conversation_id=data["conversation"]).count() == 1


def test_command_no_continue(parent: Conversation) -> None:
    fork_command(str(parent.pk), "--at-message", "2", "--tool-result", "x", "--no-continue")
    fork = Conversation.objects.get(parent=parent)
    assert roles(fork)[-1] == "tool" and fork.runs.count() == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["999", "--at-message", "1"], "No conversation 999"),
        (["{pk}", "--at-message", "42"], "Message 42 is out of range"),
        (["{pk}", "--at-message", "42", "--tool-result", "x"], "Message 42 is out of range"),
        (["{pk}", "--at-message", "2", "--tool-call", "zzz", "--tool-result", "x"], "'zzz'"),
        (["{pk}", "--at-message", "2", "--tool-call", "call_1"], "needs --tool-result"),
        (["{pk}", "--at-message", "0", "--tool-result", "x"], "no tool call at or before"),
        (["{pk}", "--at-message", "8", "--tool-result", "x"], "call_2, call_3"),
        (["{pk}", "--at-message", "1", "--user", "nobody"], "No user named 'nobody'"),
        (["{pk}", "--at-message", "1", "--user", "eve"], "as 'eve': This conversation is not"),
    ],
)
def test_command_errors(parent: Conversation, args: list[str], message: str) -> None:
    get_user_model().objects.create_user("eve")
    with pytest.raises(CommandError, match=message):
        fork_command(*[arg.format(pk=parent.pk) for arg in args])
    assert Conversation.objects.count() == 1


def test_command_user_who_owns_the_parent(parent: Conversation, user: Any) -> None:
    fork_command(str(parent.pk), "--at-message", "3", "--user", "ada")
    assert Conversation.objects.get(parent=parent).owner == user


def test_message_rows_keep_their_indexes(parent: Conversation) -> None:
    fork = forks.fork_conversation(parent, owner=parent.owner, at_message=8)
    pairs = zip(parent.messages.order_by("index"), fork.messages.order_by("index"), strict=True)
    for original, copy in pairs:
        assert (original.index, original.role, original.tool_call_id) == (
            copy.index,
            copy.role,
            copy.tool_call_id,
        )
        assert copy.pk != original.pk and copy.created_at == original.created_at
    assert isinstance(fork.messages.first(), Message)


def test_a_fork_keeps_the_agent_version_its_parent_started_from(
    parent: Conversation, user: Any
) -> None:
    support = agents.create_agent(name="Support", conversation=parent, user=user)
    parent.refresh_from_db()
    assert parent.agent_version == support.published
    fork = forks.fork_conversation(parent, owner=user, at_message=3)
    assert fork.agent_version == support.published
    assert fork.changed_from() is None
    parent.set_agent_parameters(parent.agent_parameters().model_copy(update={"temperature": 0.1}))
    parent.save()
    changed = forks.fork_conversation(parent, owner=user, at_message=3)
    assert changed.changed_from() == support.published
