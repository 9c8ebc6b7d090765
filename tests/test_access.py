"""Who may do what (chat/access.py), asked at every entry point: pages, socket actions, the
admin, commands and the start of a run, each for a conversation's owner, a team reader (the
conversation is shared), a stranger and a staff member (it is not shared with either). The
same walk over an evaluation's replay: read and annotated as a chat is, written in by no one.

The agents' rule walks the same way: a private and a team agent, for its owner, a teammate,
someone not logged in and a staff member allowed to change agents.

Each cell is one test: the entry point, the role, what happens. What happens includes what was
written (or not), so a refusal that still writes shows as such."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser, Permission, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from chat import access, agents, runs
from chat.agent.scripted import ScriptedChatClient
from chat.evals import cases
from chat.models import (
    Agent,
    AgentVersion,
    Annotation,
    Case,
    Conversation,
    Message,
    Purpose,
    Run,
    Version,
    Visibility,
)
from chat.routing import websocket_urlpatterns
from chat.runs import lifecycle
from chat.testing import evals as made_for
from chat.testing import factories as make
from chat.testing.sockets import DONE

ROLES = ("owner", "reader", "stranger", "staff")
HTMX = {"HTTP_HX_REQUEST": "true"}


def scene(role: str) -> tuple[Conversation, User]:
    """Ada's conversation (a question, a search_cards call, a reply), shared with the team
    when the role is a reader's, and the user playing `role`."""
    made = made_for.searched(make.user("ada"), "Pills")
    if role == "reader":
        Conversation.objects.filter(pk=made.pk).update(shared=True)
        made.refresh_from_db()
    users = {
        "owner": lambda: made.owner,
        "reader": lambda: make.user("bob"),
        "stranger": lambda: make.user("mallory"),
        "staff": lambda: make.user("root", is_staff=True, is_superuser=True),
    }
    return made, users[role]()


def make_replay(made: Conversation) -> Conversation:
    """The conversation turned into an evaluation's replay."""
    Conversation.objects.filter(pk=made.pk).update(purpose=Purpose.EVAL)
    made.refresh_from_db()
    return made


def replay_scene(role: str) -> tuple[Conversation, User]:
    """`scene(role)` with Ada's conversation an evaluation's replay."""
    made, user = scene(role)
    return make_replay(made), user


@pytest.fixture
def cast(role: str) -> tuple[Conversation, User]:
    """`scene(role)`, made before an async test's loop runs (its run has a loop of its own)."""
    return scene(role)


def table(rows: dict[str, tuple[str, ...]]) -> list[Any]:
    return [
        pytest.param(entry, role, expected, id=f"{entry}-{role}")
        for entry, outcomes in rows.items()
        for role, expected in zip(ROLES, outcomes, strict=True)
    ]


# Pages. Each entry: what the user's client gets from one page of the conversation.


def page(web: Client, made: Conversation) -> str:
    response = web.get(reverse("chat:conversation_detail", args=[made.pk]))
    if response.status_code != 200:
        return str(response.status_code)
    html = response.content.decode()
    if "data-read-only" in html:
        return "read-only" if 'id="composer"' not in html else "read-only with a composer"
    return "writable"


def got(
    name: str, *args: Callable[[Conversation], object]
) -> Callable[[Client, Conversation], str]:
    """GET a page named `name`, with the conversation's id and then `args` of it."""

    def entry(web: Client, made: Conversation) -> str:
        url = reverse(f"chat:{name}", args=[made.pk, *(arg(made) for arg in args)])
        return str(web.get(url, **HTMX).status_code)  # type: ignore[arg-type]

    return entry


def run_of(made: Conversation) -> int:
    return made.runs.get().pk


def call_of(made: Conversation) -> int:
    return made.runs.get().tool_calls.get().pk


def settings(web: Client, made: Conversation) -> str:
    before = made.parameters
    response = web.post(
        reverse("chat:conversation_settings", args=[made.pk]),
        make.settings_form(**{"agent-temperature": "1.5"}),
    )
    made.refresh_from_db()
    return f"{response.status_code}, {'saved' if made.parameters != before else 'unchanged'}"


def rename(web: Client, made: Conversation) -> str:
    response = web.post(reverse("chat:conversation_rename", args=[made.pk]), {"title": "Mine"})
    made.refresh_from_db()
    return f"{response.status_code}, {made.title}"


def sharing(shared: bool) -> Callable[[Client, Conversation], str]:
    def entry(web: Client, made: Conversation) -> str:
        data = {"shared": "on"} if shared else {}
        response = web.post(reverse("chat:conversation_share", args=[made.pk]), data)
        made.refresh_from_db()
        return f"{response.status_code}, {'shared' if made.shared else 'private'}"

    return entry


def delete(web: Client, made: Conversation) -> str:
    response = web.post(reverse("chat:conversation_delete", args=[made.pk]))
    kept = Conversation.objects.filter(pk=made.pk).exists()
    return f"{response.status_code}, {'kept' if kept else 'deleted'}"


def annotate(name: str, target: Callable[[Conversation], int]) -> Callable[[Client, Any], str]:
    def entry(web: Client, made: Conversation) -> str:
        url = reverse(f"chat:{name}", args=[made.pk, target(made)])
        response = web.post(url, {"verdict": "bad", "note": "wrong tool"}, **HTMX)  # type: ignore[arg-type]
        return f"{response.status_code}, {Annotation.objects.count()} saved"

    return entry


def save_case(web: Client, made: Conversation) -> str:
    url = reverse("chat:reply_case", args=[made.pk, run_of(made)])
    form = {"set_name": "cards", "title": "", "expect": "reply", "note": ""}
    response = web.post(url, form, **HTMX)  # type: ignore[arg-type]
    return f"{response.status_code}, {Case.objects.count()} saved"


def fork(web: Client, made: Conversation) -> str:
    response = web.post(reverse("chat:fork_message", args=[made.pk, 0]))
    return f"{response.status_code}, {Conversation.objects.count() - 1} forks"


def continue_in_a_copy(web: Client, made: Conversation) -> str:
    response = web.post(reverse("chat:conversation_copy", args=[made.pk]))
    return f"{response.status_code}, {Conversation.objects.count() - 1} forks"


def download(web: Client, made: Conversation) -> str:
    return str(
        web.get(reverse("chat:conversation_download", args=[made.pk, "markdown"])).status_code
    )


def compare(web: Client, made: Conversation) -> str:
    response = web.get(reverse("chat:evals:compare"), {"conversation": made.pk})
    return str(response.status_code)


def search(web: Client, made: Conversation) -> str:
    response = web.get(reverse("chat:conversation_search"), {"q": "Pills"})
    found = f'id="conversation-link-{made.pk}"' in response.content.decode()
    return "found" if found else "not found"


def sidebar(web: Client, made: Conversation) -> str:
    """Where a page's sidebar lists the conversation: among the user's own, apart as shared,
    or nowhere."""
    html = web.get(reverse("chat:evals:index")).content.decode()
    link = f'href="{reverse("chat:conversation_detail", args=[made.pk])}"'
    if f'id="conversation-link-{made.pk}"' in html:
        return "own"
    shared = html.partition('class="shared-list"')[2]
    return "shared" if link in shared else "absent"


def case_set(web: Client, made: Conversation) -> str:
    """The page of a set with a case taken from the conversation links it to who may read it."""
    case = cases.save_case(made, 0, set_name="cards", user=made.owner)
    html = web.get(reverse("chat:evals:set", args=[case.case_set_id])).content.decode()
    link = f'href="{reverse("chat:conversation_detail", args=[made.pk])}"'
    return "linked" if link in html else "not linked"


PAGES: dict[str, Callable[[Client, Conversation], str]] = {
    "conversation page": page,
    "settings page": got("conversation_settings"),
    "settings saved": settings,
    "model picker": got("conversation_model"),
    "rename": rename,
    "share": sharing(True),
    "unshare": sharing(False),
    "delete": delete,
    "inspector and waterfall": got("run_inspect", run_of),
    "tool call": got("tool_call_detail", call_of),
    "message text": got("message_text", lambda _: 0),
    "reply text": got("reply_text", lambda _: 1),
    "annotate a reply": annotate("reply_annotation", run_of),
    "annotate a tool call": annotate("tool_call_annotation", call_of),
    "save as case": save_case,
    "fork page": got("fork_message", lambda _: 0),
    "fork": fork,
    "fork with a tool result": got("fork_tool_call", call_of),
    "continue in my own copy": continue_in_a_copy,
    "download": download,
    "compare its last turn": compare,
    "search": search,
    "sidebar": sidebar,
    "case set page": case_set,
}
#                        owner                reader              stranger            staff
PAGE_OUTCOMES = {
    "conversation page": ("writable", "read-only", "404", "404"),
    "settings page": ("200", "404", "404", "404"),
    "settings saved": ("302, saved", "404, unchanged", "404, unchanged", "404, unchanged"),
    "model picker": ("200", "404", "404", "404"),
    "rename": ("302, Mine", "404, Pills", "404, Pills", "404, Pills"),
    "share": ("302, shared", "404, shared", "404, private", "404, private"),
    "unshare": ("302, private", "404, shared", "404, private", "404, private"),
    "delete": ("302, deleted", "404, kept", "404, kept", "404, kept"),
    "inspector and waterfall": ("200", "200", "404", "404"),
    "tool call": ("200", "200", "404", "404"),
    "message text": ("200", "200", "404", "404"),
    "reply text": ("200", "200", "404", "404"),
    "annotate a reply": ("200, 1 saved", "200, 1 saved", "404, 0 saved", "404, 0 saved"),
    "annotate a tool call": ("200, 1 saved", "200, 1 saved", "404, 0 saved", "404, 0 saved"),
    "save as case": ("200, 1 saved", "200, 1 saved", "404, 0 saved", "404, 0 saved"),
    "fork page": ("200", "200", "404", "404"),
    "fork": ("302, 1 forks", "302, 1 forks", "404, 0 forks", "404, 0 forks"),
    "fork with a tool result": ("200", "200", "404", "404"),
    "continue in my own copy": ("302, 1 forks", "302, 1 forks", "404, 0 forks", "404, 0 forks"),
    "download": ("200", "200", "404", "404"),
    "compare its last turn": ("200", "200", "404", "404"),
    "search": ("found", "not found", "not found", "not found"),
    "sidebar": ("own", "shared", "absent", "absent"),
    "case set page": ("linked", "linked", "not linked", "not linked"),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("entry", "role", "expected"), table(PAGE_OUTCOMES))
def test_pages(entry: str, role: str, expected: str) -> None:
    made, user = scene(role)
    assert PAGES[entry](make.logged_in(user), made) == expected


def test_every_page_entry_has_its_outcomes() -> None:
    assert PAGES.keys() == PAGE_OUTCOMES.keys()
    assert REPLAY_PAGE_OUTCOMES.keys() <= PAGES.keys()


# The same pages of a replay: its chat address leads to its run's page, it is read and
# annotated as a chat is, and no one changes it, its owner included.
NOBODY = ("404", "404", "404", "404")
REPLAY_PAGE_OUTCOMES = {
    "conversation page": ("302", "302", "404", "404"),
    "settings page": NOBODY,
    "settings saved": ("404, unchanged",) * 4,
    "model picker": NOBODY,
    "rename": ("404, Pills",) * 4,
    "share": ("404, private", "404, shared", "404, private", "404, private"),
    "unshare": ("404, private", "404, shared", "404, private", "404, private"),
    "delete": ("404, kept",) * 4,
    "fork": ("404, 0 forks",) * 4,
    "continue in my own copy": ("404, 0 forks",) * 4,
    "download": ("200", "200", "404", "404"),
    "inspector and waterfall": ("200", "200", "404", "404"),
    "annotate a tool call": ("200, 1 saved", "200, 1 saved", "404, 0 saved", "404, 0 saved"),
    "save as case": ("200, 1 saved", "200, 1 saved", "404, 0 saved", "404, 0 saved"),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("entry", "role", "expected"), table(REPLAY_PAGE_OUTCOMES))
def test_replay_pages(entry: str, role: str, expected: str) -> None:
    made, user = replay_scene(role)
    assert PAGES[entry](make.logged_in(user), made) == expected


# The admin: for staff only, every conversation read-only; its link back to the chat only for
# whoever may read the conversation there.


def admin_page(web: Client, made: Conversation) -> str:
    response = web.get(reverse("admin:chat_conversation_change", args=[made.pk]))
    if response.status_code != 200:
        return f"{response.status_code} {response.get('Location', '').split('?')[0]}"
    linked = "Open in the chat" in response.content.decode()
    return "200, a link to the chat" if linked else "200, no link to the chat"


def admin_change(web: Client, made: Conversation) -> str:
    url = reverse("admin:chat_conversation_change", args=[made.pk])
    response = web.post(url, {"owner": made.owner_id, "title": "Changed"})
    made.refresh_from_db()
    return f"{response.status_code}, {made.title}"


def admin_delete(web: Client, made: Conversation) -> str:
    data = {"action": "delete_selected", "_selected_action": [made.pk], "post": "yes"}
    response = web.post(reverse("admin:chat_conversation_changelist"), data)
    kept = Conversation.objects.filter(pk=made.pk).exists()
    return f"{response.status_code}, {'kept' if kept else 'deleted'}"


def as_staff_member(role: str, user: User) -> User:
    """The user made a staff member who may view conversations (staff already is one)."""
    if role != "staff":
        user.is_staff = True
        user.save()
        user.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    return User.objects.get(pk=user.pk)


ADMIN: dict[str, Callable[[Client, Conversation], str]] = {
    "admin page": admin_page,
    "admin change": admin_change,
    "admin delete action": admin_delete,
}
LOGIN = "302 /admin/login/"
ADMIN_OUTCOMES = {
    "admin page": (LOGIN, LOGIN, LOGIN, "200, no link to the chat"),
    "admin change": ("302, Pills", "302, Pills", "302, Pills", "403, Pills"),
    "admin delete action": ("302, kept", "302, kept", "302, kept", "302, deleted"),
}
STAFF_MEMBER_OUTCOMES = {
    "admin page": (
        "200, a link to the chat",
        "200, a link to the chat",
        "200, no link to the chat",
        "200, no link to the chat",
    ),
    "admin change": ("403, Pills", "403, Pills", "403, Pills", "403, Pills"),
    "admin delete action": ("200, kept", "200, kept", "200, kept", "302, deleted"),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("entry", "role", "expected"), table(ADMIN_OUTCOMES))
def test_admin(entry: str, role: str, expected: str) -> None:
    made, user = scene(role)
    assert ADMIN[entry](make.logged_in(user), made) == expected


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("entry", "role", "expected"), table(STAFF_MEMBER_OUTCOMES))
def test_admin_as_a_staff_member(entry: str, role: str, expected: str) -> None:
    made, user = scene(role)
    assert ADMIN[entry](make.logged_in(as_staff_member(role, user)), made) == expected


# Commands, naming the user with --user.


def command(*args: str) -> str:
    try:
        call_command(*args, stdout=StringIO(), stderr=StringIO())
    except CommandError as exc:
        return str(exc)
    return ""


def chat_command(made: Conversation, user: User) -> str:
    name = user.get_username()
    failure = command("chat", "and now?", "--conversation", str(made.pk), "--user", name)
    sent = Message.objects.filter(conversation=made, content="and now?").exists()
    return f"{'sent' if sent else 'not sent'}{': ' if failure else ''}{failure}"


def fork_command(made: Conversation, user: User) -> str:
    name = user.get_username()
    failure = command("fork", str(made.pk), "--at-message", "0", "--user", name)
    forks = Conversation.objects.filter(parent=made).count()
    return f"{forks} forks{': ' if failure else ''}{failure}"


def cases_command(made: Conversation, user: User) -> str:
    name = user.get_username()
    failure = command(
        "cases", "add", "--conversation", str(made.pk), "--at-message", "0", "--user", name
    )
    kept = Case.objects.filter(conversation=made).count()
    return f"{kept} kept{': ' if failure else ''}{failure}"


COMMANDS: dict[str, Callable[[Conversation, User], str]] = {
    "manage.py chat": chat_command,
    "manage.py fork": fork_command,
    "manage.py cases add": cases_command,
}
COMMAND_OUTCOMES = {
    "manage.py chat": (
        "sent",
        f"not sent: Conversation {{pk}}, as 'bob': {access.READ_ONLY}",
        f"not sent: Conversation {{pk}}, as 'mallory': {access.NOT_YOURS}",
        f"not sent: Conversation {{pk}}, as 'root': {access.NOT_YOURS}",
    ),
    "manage.py fork": (
        "1 forks",
        "1 forks",
        f"0 forks: Conversation {{pk}}, as 'mallory': {access.NOT_SHARED}",
        f"0 forks: Conversation {{pk}}, as 'root': {access.NOT_SHARED}",
    ),
    "manage.py cases add": (
        "1 kept",
        "1 kept",
        f"0 kept: {access.NOT_SHARED}",
        f"0 kept: {access.NOT_SHARED}",
    ),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("entry", "role", "expected"), table(COMMAND_OUTCOMES))
def test_commands(entry: str, role: str, expected: str) -> None:
    made, user = scene(role)
    assert COMMANDS[entry](made, user) == expected.format(pk=made.pk)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("entry", ["manage.py chat", "manage.py fork"])
def test_commands_in_a_replay_say_it_is_read_only(entry: str) -> None:
    made, owner = replay_scene("owner")
    expected = {"manage.py chat": "not sent", "manage.py fork": "0 forks"}[entry]
    refused = f"Conversation {made.pk}, as 'ada': This is an evaluation's replay: it is read-only."
    assert COMMANDS[entry](made, owner) == f"{expected}: {refused}"


# start_run, called directly: it asks the rule itself, whoever its caller.


def fingerprint(made: Conversation) -> tuple[Any, ...]:
    """What a write changes: the user messages and where they are, versions, runs."""
    messages = Message.objects.filter(conversation=made, role="user").order_by("pk")
    return (
        list(messages.values_list("pk", "version_id", "content")),
        Version.objects.filter(conversation=made).count(),
        list(Run.objects.filter(conversation=made).order_by("pk").values_list("pk", "status")),
    )


async def start_directly(made: Conversation, user: User) -> str:
    before = await database_sync_to_async(fingerprint)(made)
    client = ScriptedChatClient(["Started."])
    try:
        handle = await runs.start_run(conversation=made, user=user, content="go", client=client)
    except runs.RunRefused as exc:
        after = await database_sync_to_async(fingerprint)(made)
        return f"refused, {'nothing' if after == before else 'yet something'} written: {exc}"
    run = await handle.task
    return f"started, {run.status}"


START_OUTCOMES = {
    "start_run": (
        "started, completed",
        f"refused, nothing written: {access.READ_ONLY}",
        f"refused, nothing written: {access.NOT_YOURS}",
        f"refused, nothing written: {access.NOT_YOURS}",
    )
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("entry", "role", "expected"), table(START_OUTCOMES))
async def test_start_run(
    entry: str, role: str, expected: str, cast: tuple[Conversation, User]
) -> None:
    made, user = cast
    assert await start_directly(made, user) == expected


REPLAY_START_OUTCOMES = {
    "start_run": (
        f"refused, nothing written: {access.REPLAY}",
        f"refused, nothing written: {access.REPLAY}",
        f"refused, nothing written: {access.NOT_YOURS}",
        f"refused, nothing written: {access.NOT_YOURS}",
    )
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("entry", "role", "expected"), table(REPLAY_START_OUTCOMES))
async def test_start_run_in_a_replay(
    entry: str, role: str, expected: str, cast: tuple[Conversation, User]
) -> None:
    made, user = cast
    assert await start_directly(await database_sync_to_async(make_replay)(made), user) == expected


# Socket actions: each frame on a socket of the conversation, opened as the role.

FRAMES: dict[str, tuple[dict[str, Any], str]] = {
    "send": ({"action": "send", "message": "and now?"}, DONE),
    "edit": ({"action": "edit", "index": 0, "message": "edited"}, DONE),
    "regenerate": ({"action": "regenerate", "index": 0}, DONE),
    "switch": ({"action": "switch", "index": 0, "version": 1}, 'hx-swap-oob="innerHTML"'),
    "cancel": ({"action": "cancel"}, DONE),
}
"""Each action's frame, and what the last frame of its answer holds."""
SOCKET_OUTCOMES = {
    action: ("done", "read-only, nothing written", "closed 4404", "closed 4404")
    for action in FRAMES
}
REPLAY_SOCKET_OUTCOMES = {
    action: ("a replay, nothing written", "a replay, nothing written", "closed 4404", "closed 4404")
    for action in FRAMES
}
REFUSALS = {escape(access.READ_ONLY): "read-only", escape(access.REPLAY): "a replay"}
"""The lines a socket refuses a frame with (as HTML), and what each outcome calls them."""


async def prepare(action: str, made: Conversation) -> runs.RunHandle | None:
    """What the action acts on: a second version to switch to, a run in progress to cancel."""
    if action == "switch":
        again = ScriptedChatClient(["Again."])
        await (await make.start_as_owner(made, None, again, version_from=0)).task
    if action == "cancel":
        slow = ScriptedChatClient([" ".join(["slow"] * 500)], delay=0.01)
        return await make.start_as_owner(made, "take your time", slow)
    return None


async def act(user: User, made: Conversation, action: str) -> str:
    router = URLRouter(websocket_urlpatterns)  # type: ignore[arg-type]
    socket = WebsocketCommunicator(router, f"/ws/conversations/{made.pk}/")
    socket.scope["user"] = user  # type: ignore[typeddict-unknown-key]
    connected, code = await socket.connect()
    if not connected:
        return f"closed {code}"
    frame, last = FRAMES[action]
    before = await database_sync_to_async(fingerprint)(made)
    await socket.send_to(text_data=json.dumps(frame))
    while True:
        text = await socket.receive_from(timeout=5)
        refusal = next((name for line, name in REFUSALS.items() if line in text), None)
        if refusal or last in text:
            break
    await socket.disconnect()
    after = await database_sync_to_async(fingerprint)(made)
    if refusal:
        return f"{refusal}, {'nothing' if after == before else 'yet something'} written"
    return "done" if after != before else "nothing done"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("action", "role", "expected"), table(SOCKET_OUTCOMES))
async def test_socket_actions(
    action: str,
    role: str,
    expected: str,
    cast: tuple[Conversation, User],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lifecycle, "build_client", lambda *_, **__: ScriptedChatClient(["Done."]))
    made, user = cast
    running = await prepare(action, made)
    try:
        assert await act(user, made, action) == expected
    finally:
        if running is not None and not running.task.done():
            running.task.cancel()
            await asyncio.wait([running.task])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("action", "role", "expected"), table(REPLAY_SOCKET_OUTCOMES))
async def test_socket_actions_in_a_replay(
    action: str,
    role: str,
    expected: str,
    cast: tuple[Conversation, User],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lifecycle, "build_client", lambda *_, **__: ScriptedChatClient(["Done."]))
    made, user = cast
    running = await prepare(action, made)  # as a chat: in a replay no one starts a run
    made = await database_sync_to_async(make_replay)(made)
    try:
        assert await act(user, made, action) == expected
    finally:
        if running is not None and not running.task.done():
            running.task.cancel()
            await asyncio.wait([running.task])


# The rule's two forms: the filter lists and lookups use, and the check of one conversation in
# hand (with its refusal line) answer alike, for every action, role and purpose.


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("purpose", Purpose.values)
@pytest.mark.parametrize("role", ROLES)
def test_the_filter_and_the_check_agree(role: str, purpose: str) -> None:
    made, user = scene(role)
    Conversation.objects.filter(pk=made.pk).update(purpose=purpose)
    made.refresh_from_db()
    for action in access.Action:
        listed = access.conversations(user, action).filter(pk=made.pk).exists()
        assert access.may(user, action, made) is listed, action
        assert (access.denied(user, action, made) == "") is listed, action


# Agents: a private agent is its owner's alone; the team's agents are used by everyone logged
# in, and changed (versions, publishing) by their owner and whoever may change agents.

AGENT_ROLES = ("owner", "teammate", "anonymous", "staff with change")


def agent_scene(visibility: str, role: str) -> tuple[Agent, AgentVersion, Any]:
    """Ada's agent Support (version 1 published, version 2 a draft), and the user playing
    `role`."""
    ada = make.user("ada")
    made = make.conversation(ada, "settings", system_prompts=["Answer for support."])
    agent = agents.create_agent(name="Support", conversation=made, user=ada, visibility=visibility)
    made.set_agent_parameters(made.agent_parameters().changed(temperature=0.7))
    made.save()
    draft = agents.new_version(agent=agent, conversation=made, user=ada)
    if role == "owner":
        return agent, draft, ada
    if role == "anonymous":
        return agent, draft, AnonymousUser()
    user = make.user("bob" if role == "teammate" else "sam", is_staff=role != "teammate")
    if role == "staff with change":
        user.user_permissions.add(Permission.objects.get(codename="change_agent"))
        user = User.objects.get(pk=user.pk)  # permissions are cached per instance
    return agent, draft, user


SHORT = {
    access.PRIVATE_AGENT: "private",
    access.NOT_YOUR_AGENT: "not theirs",
    access.LOG_IN: "log in",
    "No agent named 'Support' that you may use.": "not found",
}


def attempt(call: Callable[[], str]) -> str:
    try:
        return call()
    except agents.AgentRefused as exc:
        return SHORT.get(str(exc), str(exc))


def listed(action: access.AgentAction) -> Callable[[Agent, AgentVersion, Any], str]:
    def entry(agent: Agent, draft: AgentVersion, user: Any) -> str:
        found = access.agents(user, action).filter(pk=agent.pk).exists()
        return "listed" if found else "not listed"

    return entry


def start(published: bool) -> Callable[[Agent, AgentVersion, Any], str]:
    def entry(agent: Agent, draft: AgentVersion, user: Any) -> str:
        version = agent.published if published else draft

        def go() -> str:
            made = agents.start_conversation(user=user, version=version)
            assert (made.owner, made.agent_version) == (user, version)
            return "started"

        return attempt(go)

    return entry


def new_version(agent: Agent, draft: AgentVersion, user: Any) -> str:
    owner = user if user.is_authenticated else agent.owner
    made = make.conversation(owner, "theirs", temperature=1.5)

    def go() -> str:
        return f"made v{agents.new_version(agent=agent, conversation=made, user=user).number}"

    result = attempt(go)
    assert agent.versions.count() == (3 if result == "made v3" else 2)
    return result


def publish(agent: Agent, draft: AgentVersion, user: Any) -> str:
    result = attempt(
        lambda: f"published v{agents.publish(version=draft, user=user).published.number}"
    )
    agent.refresh_from_db()
    assert agent.published.number == (2 if result == "published v2" else 1)
    return result


def choose(agent: Agent, draft: AgentVersion, user: Any) -> str:
    return attempt(lambda: agents.choose_default(user=user, agent=agent) or "chosen")


def find(agent: Agent, draft: AgentVersion, user: Any) -> str:
    return attempt(lambda: f"found v{agents.find_version(user, 'Support').number}")


AGENT_ENTRIES: dict[str, Callable[[Agent, AgentVersion, Any], str]] = {
    "listed to use": listed(access.AgentAction.USE),
    "listed to change": listed(access.AgentAction.CHANGE),
    "start from the published version": start(published=True),
    "start from a draft": start(published=False),
    "new version": new_version,
    "publish": publish,
    "choose as default": choose,
    "find by name": find,
}
#                              owner          teammate       anonymous      staff with change
PRIVATE_AGENT_OUTCOMES = {
    "listed to use": ("listed", "not listed", "not listed", "not listed"),
    "listed to change": ("listed", "not listed", "not listed", "not listed"),
    "start from the published version": ("started", "private", "log in", "private"),
    "start from a draft": ("started", "private", "log in", "private"),
    "new version": ("made v3", "private", "log in", "private"),
    "publish": ("published v2", "private", "log in", "private"),
    "choose as default": ("chosen", "private", "log in", "private"),
    "find by name": ("found v1", "not found", "not found", "not found"),
}
TEAM_AGENT_OUTCOMES = {
    "listed to use": ("listed", "listed", "not listed", "listed"),
    "listed to change": ("listed", "not listed", "not listed", "listed"),
    "start from the published version": ("started", "started", "log in", "started"),
    "start from a draft": ("started", "started", "log in", "started"),
    "new version": ("made v3", "not theirs", "log in", "made v3"),
    "publish": ("published v2", "not theirs", "log in", "published v2"),
    "choose as default": ("chosen", "chosen", "log in", "chosen"),
    "find by name": ("found v1", "found v1", "not found", "found v1"),
}


def agent_table(visibility: str, rows: dict[str, tuple[str, ...]]) -> list[Any]:
    return [
        pytest.param(visibility, entry, role, expected, id=f"{visibility}-{entry}-{role}")
        for entry, outcomes in rows.items()
        for role, expected in zip(AGENT_ROLES, outcomes, strict=True)
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("visibility", "entry", "role", "expected"),
    agent_table(Visibility.PRIVATE, PRIVATE_AGENT_OUTCOMES)
    + agent_table(Visibility.TEAM, TEAM_AGENT_OUTCOMES),
)
def test_agents(visibility: str, entry: str, role: str, expected: str) -> None:
    agent, draft, user = agent_scene(visibility, role)
    assert AGENT_ENTRIES[entry](agent, draft, user) == expected


def test_every_agent_entry_has_its_outcomes() -> None:
    assert AGENT_ENTRIES.keys() == PRIVATE_AGENT_OUTCOMES.keys() == TEAM_AGENT_OUTCOMES.keys()


@pytest.mark.django_db
def test_a_superuser_changes_the_teams_agents_but_not_a_private_one() -> None:
    root = make.user("root", is_staff=True, is_superuser=True)
    private, private_draft, _ = agent_scene(Visibility.PRIVATE, "owner")
    with pytest.raises(agents.AgentRefused, match="This agent is private"):
        agents.publish(version=private_draft, user=root)
    Agent.objects.filter(pk=private.pk).update(visibility=Visibility.TEAM)
    private.refresh_from_db()
    assert agents.publish(version=private_draft, user=root).published == private_draft


@pytest.mark.django_db
@pytest.mark.parametrize("visibility", Visibility.values)
@pytest.mark.parametrize("role", [*AGENT_ROLES, "superuser"])
def test_the_agent_filter_and_the_check_agree(visibility: str, role: str) -> None:
    agent, _, user = agent_scene(visibility, "owner" if role == "superuser" else role)
    if role == "superuser":
        user = make.user("root", is_staff=True, is_superuser=True)
    for action in access.AgentAction:
        found = access.agents(user, action).filter(pk=agent.pk).exists()
        assert access.may_agent(user, action, agent) is found, action
        assert (access.agent_denied(user, action, agent) == "") is found, action
        assert Agent.objects.usable_by(user).filter(pk=agent.pk).exists() is (
            access.may_agent(user, access.AgentAction.USE, agent)
        )
