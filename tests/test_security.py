"""Security properties across the app: the API key stays secret, every form needs a CSRF token,
users reach only their own conversations, and stored model output cannot inject markup."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from datetime import timedelta
from html.parser import HTMLParser
from io import StringIO
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.core import serializers
from django.core.management import CommandError, call_command
from django.db.models import Model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agentlab_site.asgi import application
from chat import agent, runs, transcripts
from chat.agent.scripted import ScriptedChatClient
from chat.models import Conversation, HistoryRepair, Message, ModelCall, Run, ToolCall
from chat.rendering import markdown
from chat.routing import websocket_urlpatterns
from chat.runs import lifecycle
from chat.testing import factories as make
from chat.testing.openai_script import chunk, error, sse, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.testing.sockets import DONE, connect, frames_until, send

MODELS: list[type[Model]] = [Conversation, Run, Message, ToolCall, ModelCall, HistoryRepair]
ORIGIN = (b"origin", b"http://localhost")
PASSWORD = "pw-123456789"


def make_user(name: str, password: str | None = None, **fields: Any) -> Any:
    """Without a password unless asked: tests log in with force_login, and hashing is slow."""
    return get_user_model().objects.create_user(name, password=password, **fields)


def admin_url(model: type[Model], view: str, *args: object) -> str:
    return reverse(f"admin:chat_{model._meta.model_name}_{view}", args=args)


def admin_pages() -> list[str]:
    """The changelist of every chat model and the change page of every row."""
    pages = []
    for model in MODELS:
        pages.append(admin_url(model, "changelist"))
        pages += [
            admin_url(model, "change", pk)
            for pk in model._default_manager.values_list("pk", flat=True)
        ]
    return pages


def rows() -> str:
    """Every row of every chat model, serialised."""
    return "\n".join(
        serializers.serialize("json", model._default_manager.order_by("pk")) for model in MODELS
    )


def command(name: str, *args: str) -> str:
    """stdout, stderr and the CommandError (if any) of a management command, as one text."""
    out, err = StringIO(), StringIO()
    try:
        call_command(name, *args, stdout=out, stderr=err)
        failure = ""
    except CommandError as exc:
        failure = str(exc)
    return "\n".join([out.getvalue(), err.getvalue(), failure])


# The API key reaches the provider and nowhere else.

CANARY = "sk-leak-canary-7f3a"
ECHO = f"Incorrect API key provided: {CANARY}. You can find your API key at https://x.test/keys."


@pytest.fixture
def provider(settings: Any, fake_openai: FakeOpenAIServer) -> FakeOpenAIServer:
    settings.OPENAI_BASE_URL = fake_openai.base_url
    settings.OPENAI_API_KEY = CANARY
    settings.AGENTLAB_MODEL = "m"
    return fake_openai


def good_round() -> tuple[Any, ...]:
    """A successful tool round, then text."""
    return (
        tool_turn([("call_1", "get_current_time", '{"timezone": "UTC"}')], usage=(20, 5)),
        text_turn("It is noon.", usage=(30, 4), reasoning="The tool said noon."),
    )


def assert_key_sent(fake: FakeOpenAIServer) -> None:
    """The test can fail: the key really was configured and sent, on every request."""
    posts = [r for r in fake.requests if r.method == "POST"]
    assert posts, "the fake provider received no request"
    assert {r.headers.get("authorization") for r in posts} == {f"Bearer {CANARY}"}
    assert all(CANARY not in r.raw.decode() for r in fake.requests), "the key is in a body"


def crash_mid_tool_call(conversation: Conversation, user: Any) -> Run:
    """A run left in progress by a dead process, its tool call unanswered: recovery repairs it."""
    run = Run.objects.create(
        conversation=conversation,
        created_by=user,
        model="m",
        worker="elsewhere:1:gone",
        heartbeat_at=timezone.now() - timedelta(hours=1),
    )
    call = agent.ToolCall(id="call_9", name="get_current_time", arguments="{}")
    transcripts.append_messages(
        conversation,
        [
            agent.ChatMessage(role="user", content="crash"),
            agent.ChatMessage(role="assistant", tool_calls=(call,)),
        ],
        run=run,
    )
    return run


@pytest.mark.django_db(transaction=True)
def test_the_api_key_reaches_the_provider_and_nowhere_else(
    provider: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    root = make_user("root", is_staff=True, is_superuser=True)
    conversation = make.new_conversation(root)

    provider.enqueue(*good_round())
    good = make.run_turn(conversation, "What time is it?")
    # A 500 echoing the key is retried (and logged), then a 401 echoing it ends the run.
    provider.enqueue(
        error(500, ECHO, headers={"Retry-After": "0"}, type="server_error"), error(401, ECHO)
    )
    refused = make.run_turn(conversation, "again")
    # The key echoed in an error event in the middle of a stream.
    provider.enqueue(
        sse(chunk({"role": "assistant", "content": "Hal"}), {"error": {"message": ECHO}})
    )
    broken = make.run_turn(conversation, "and again")
    crashed = crash_mid_tool_call(conversation, root)
    provider.enqueue(error(401, ECHO))
    surfaces = {"manage.py chat": command("chat", "hello", "--user", "root", "--json")}
    provider.enqueue(*[error(401, ECHO)] * 8)
    surfaces["manage.py check_provider"] = command("check_provider", "--json")

    assert good.status == "completed" and good.tool_calls.get().status == "completed"
    refused.refresh_from_db()
    broken.refresh_from_db()
    assert refused.status == broken.status == "failed"
    assert "Incorrect API key provided: [REDACTED]" in refused.error, refused.error
    assert "Incorrect API key provided: [REDACTED]" in broken.error, broken.error
    assert_key_sent(provider)

    surfaces["manage.py recover_runs"] = command("recover_runs")
    assert HistoryRepair.objects.filter(run=crashed).exists()
    surfaces["database rows"] = rows()
    surfaces["export --format full"] = command("export_transcripts", "--format", "full")
    surfaces["export --format openai"] = command("export_transcripts", "--format", "openai")
    web = make.logged_in(root)
    for url in [
        reverse("chat:conversation_detail", args=[conversation.pk]),
        reverse("chat:conversation_settings", args=[conversation.pk]),
        *admin_pages(),
    ]:
        response = web.get(url)
        assert response.status_code == 200, url
        surfaces[url] = response.content.decode()
    assert "[REDACTED]" in surfaces[reverse("chat:conversation_detail", args=[conversation.pk])]
    surfaces["logs"] = caplog.text
    assert "retry 1 of 2" in caplog.text  # the retry warning was logged, and looked at

    leaks = [name for name, text in surfaces.items() if CANARY in text]
    assert leaks == [], f"the API key leaked into: {leaks}"


@pytest.mark.django_db(transaction=True)
async def test_socket_frames_never_carry_the_api_key(
    provider: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    user = await database_sync_to_async(make_user)("ada")
    conversation = await database_sync_to_async(make.new_conversation)(user)
    provider.enqueue(*good_round(), error(401, ECHO))
    ws = await connect(user, conversation)

    await send(ws, "What time is it?")
    frames = await frames_until(ws, DONE, wait=10)
    await send(ws, "again")
    frames += await frames_until(ws, DONE, wait=10)
    await ws.disconnect()

    everything = "\n".join(frames)
    assert "It is noon." in everything
    assert "Incorrect API key provided: [REDACTED]" in everything
    assert_key_sent(provider)
    assert CANARY not in everything
    assert CANARY not in caplog.text


# CSRF: every form refuses a POST without a token.


FORMS: dict[str, Callable[[Conversation], tuple[str, dict[str, Any]]]] = {
    "create": lambda c: (reverse("chat:conversation_create"), {}),
    "rename": lambda c: (reverse("chat:conversation_rename", args=[c.pk]), {"title": "pwned"}),
    "delete": lambda c: (reverse("chat:conversation_delete", args=[c.pk]), {}),
    "settings": lambda c: (
        reverse("chat:conversation_settings", args=[c.pk]),
        make.settings_form(),
    ),
    "model picker": lambda c: (
        reverse("chat:conversation_model", args=[c.pk]),
        {"picker-profile": "", "picker-model": "pwned"},
    ),
    "logout": lambda c: (reverse("logout"), {}),
    "admin delete": lambda c: (admin_url(Conversation, "delete", c.pk), {"post": "yes"}),
    "admin action": lambda c: (
        admin_url(Conversation, "changelist"),
        {"action": "delete_selected", "_selected_action": [c.pk], "post": "yes"},
    ),
}


@pytest.mark.django_db
@pytest.mark.parametrize("form", FORMS)
def test_a_post_without_a_csrf_token_is_refused_and_changes_nothing(form: str) -> None:
    root = make_user("root", is_staff=True, is_superuser=True)
    conversation = make.new_conversation(root, title="kept")
    web = make.logged_in(root, csrf=True)
    page = reverse("chat:conversation_detail", args=[conversation.pk])
    url, data = FORMS[form](conversation)

    def state() -> tuple[str, int]:
        return rows(), web.get(page).status_code

    web.get(page)  # the owner's first visit is recorded (seen_at); later ones change nothing
    before = state()
    assert before[1] == 200
    response = web.post(url, data)
    assert response.status_code == 403
    assert state() == before

    # Control: the same POST with the token goes through, so the 403 was the token's doing.
    data["csrfmiddlewaretoken"] = web.cookies["csrftoken"].value
    response = web.post(url, data)
    assert response.status_code in (200, 302), response.status_code
    assert state() != before


@pytest.mark.django_db
def test_the_admin_login_form_needs_a_csrf_token() -> None:
    make_user("root", PASSWORD, is_staff=True, is_superuser=True)
    anonymous = Client(enforce_csrf_checks=True)
    response = anonymous.post(reverse("admin:login"), {"username": "root", "password": PASSWORD})
    assert response.status_code == 403
    assert "_auth_user_id" not in anonymous.session


# Users reach only their own conversations.


@pytest.mark.django_db
def test_another_users_pages_are_404_and_untouched() -> None:
    me = make_user("ada")
    theirs = make.new_conversation(make_user("mallory"), title="secret plans")
    web = make.logged_in(me)
    before = rows()
    for name in ["conversation_detail", "conversation_settings"]:
        assert web.get(reverse(f"chat:{name}", args=[theirs.pk])).status_code == 404
    for name, data in [
        ("conversation_settings", make.settings_form()),
        ("conversation_rename", {"title": "mine"}),
        ("conversation_delete", {}),
    ]:
        assert web.post(reverse(f"chat:{name}", args=[theirs.pk]), data).status_code == 404
    assert rows() == before
    assert b"secret plans" not in web.get(reverse("chat:conversation_list"), follow=True).content


@pytest.mark.django_db
def test_the_admin_sends_non_staff_users_to_its_login() -> None:
    owner = make_user("root", is_staff=True, is_superuser=True)
    conversation = make.new_conversation(owner, title="secret plans")
    run = Run.objects.create(conversation=conversation, status="completed")
    transcripts.append_messages(
        conversation, [agent.ChatMessage(role="user", content="x")], run=run
    )
    web = make.logged_in(make_user("bob"))
    for url in admin_pages():
        response = web.get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url


@pytest.mark.django_db(transaction=True)
async def test_sockets_to_another_users_conversation_are_closed_without_a_frame() -> None:
    owner = await database_sync_to_async(make_user)("owner")
    mallory = await database_sync_to_async(make_user)("mallory")
    conversation = await database_sync_to_async(make.new_conversation)(owner)
    path = f"/ws/conversations/{conversation.pk}/"

    foreign = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    foreign.scope["user"] = mallory
    assert await foreign.connect() == (False, 4404)
    assert foreign.output_queue.empty()

    web = Client()
    await database_sync_to_async(web.force_login)(mallory)
    cookie = (b"cookie", f"sessionid={web.cookies['sessionid'].value}".encode())
    through_the_app = WebsocketCommunicator(application, path, headers=[ORIGIN, cookie])
    connected, code = await through_the_app.connect()
    assert not connected and code == 4404
    assert through_the_app.output_queue.empty()

    anonymous = WebsocketCommunicator(application, path, headers=[ORIGIN])
    connected, code = await anonymous.connect()
    assert not connected and code == 4401
    assert anonymous.output_queue.empty()


@pytest.mark.django_db(transaction=True)
async def test_frames_on_my_socket_cannot_reach_another_users_conversation(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.AGENTLAB_WS_BURST = 100  # the frames below are a test, not a flood
    me = await database_sync_to_async(make_user)("ada")
    mallory = await database_sync_to_async(make_user)("mallory")
    mine = await database_sync_to_async(make.new_conversation)(me)
    theirs = await database_sync_to_async(make.new_conversation)(mallory)
    their_run = await runs.start_run(
        conversation=theirs,
        user=mallory,
        content="private",
        client=ScriptedChatClient([" ".join(["mallory-secret"] * 400)], delay=0.01),
    )
    monkeypatch.setattr(
        lifecycle, "build_client", lambda *_, **__: ScriptedChatClient(["my reply"])
    )
    ws = await connect(me, mine)

    for key in ["conversation", "pk", "conversation_id", "id", "group"]:
        await ws.send_to(text_data=json.dumps({"action": "cancel", key: theirs.pk}))
        await send(ws, f"to theirs via {key}", **{key: theirs.pk})
    frames = []
    while not await ws.receive_nothing(timeout=0.3):
        frames.append(await ws.receive_from())
    await ws.disconnect()

    assert not their_run.task.done(), "a frame on my socket cancelled their run"
    assert not any("mallory-secret" in frame or "private" in frame for frame in frames)
    their_messages = [m.content async for m in theirs.messages.filter(role="user")]
    assert their_messages == ["private"]
    landed = Message.objects.filter(content__startswith="to theirs via")
    assert await landed.filter(conversation=mine).acount() >= 4  # the frames did something
    assert not await landed.exclude(conversation=mine).aexists()
    assert await Run.objects.filter(conversation=theirs).acount() == 1
    their_run.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await their_run.task


@pytest.mark.django_db(transaction=True)
def test_manage_chat_refuses_another_users_conversation() -> None:
    make_user("ada")
    theirs = make.new_conversation(make_user("mallory"))
    before = rows()
    with pytest.raises(CommandError, match="as 'ada': This conversation is not yours"):
        call_command(
            "chat", "hi", "--conversation", str(theirs.pk), "--user", "ada",
            stdout=StringIO(), stderr=StringIO(),
        )  # fmt: skip
    assert rows() == before


# Model output cannot inject markup.

PAYLOADS = [
    "<script>alert(1)</script>",
    "[x](javascript:alert(1))",
    "<img src=x onerror=alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "[x](JaVaScRiPt:alert(1))",
    "![x](javascript:alert(1))",
    "<svg onload=alert(1)>",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "![x](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)",
    '<a href="data:text/html,<script>alert(1)</script>">x</a>',
    '<iframe src="javascript:alert(1)"></iframe>',
    '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
    "[x](vbscript:alert(1))",
    "[x](&#106;avascript:alert(1))",
    "[x](<java\tscript:alert(1)>)",
    "[x]( javascript:alert(1) )",
    "<javascript:alert(1)>",
    "[x][r]\n\n[r]: javascript:alert(1)",
    '[x](https://example.com "\\" onmouseover=\\"alert(1)")',
    '```"><script>alert(1)</script>\ncode\n```',
    "<details open ontoggle=alert(1)>x</details>",
    '<math><mi xlink:href="javascript:alert(1)">x</mi></math>',
    "<style>*{background:url(javascript:alert(1))}</style>",
    '<form action="javascript:alert(1)"><button>x</button></form>',
    "| a |\n|---|\n| <img src=x onerror=alert(1)> [x](javascript:alert(1)) |",
    "<<script>script>alert(1)<</script>/script>",
    "*<img src=x onerror=alert(1)>*",
]
SAFE_SCHEMES = {"http", "https", "mailto"}
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "data", "xlink:href", "poster", "ping"}
# Inside the transcript, model output may only become text and plain formatting.
NEVER_IN_TRANSCRIPT = {
    "script", "style", "img", "svg", "math", "iframe", "frame", "object", "embed", "form",
    "input", "button", "textarea", "base", "link", "meta", "video", "audio", "source",
}  # fmt: skip
OWN_CONTROLS = {"message-actions", "edit-form", "code-head", "pills", "annotate"}
"""Where the transcript holds the page's own controls (edit, copy, versions): templates and the
code-block renderer write them; model output can hold no element at all (Markdown's raw HTML is
off, and the sanitiser keeps no form, input or textarea)."""
SCRIPT_SOURCES = ("/static/", "/admin/jsi18n/")
VOID = {"br", "hr", "img", "input", "link", "meta", "source", "wbr", "col", "area", "base"}


class Audit(HTMLParser):
    """Everything in a page that could run script, as a list of problems."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.depth = 0  # > 0 inside the element with id="transcript"
        self.in_script = False
        self.transcript_tags: set[str] = set()
        self.own: list[int] = []  # transcript depths at which our own controls' boxes open

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.depth and OWN_CONTROLS & set((dict(attrs).get("class") or "").split()):
            self.own.append(self.depth)
        self._check(tag, attrs)
        if self.depth:
            self.depth += tag not in VOID
        elif dict(attrs).get("id") == "transcript":
            self.depth = 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._check(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self.in_script = False
        if self.depth and tag not in VOID:
            self.depth -= 1
            if self.own and self.own[-1] == self.depth:
                self.own.pop()

    def handle_data(self, data: str) -> None:
        if self.in_script and data.strip():
            self.problems.append(f"inline script {data.strip()[:60]!r}")

    def _check(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if self.depth:
            self.transcript_tags.add(tag)
            if tag == "svg" and values.get("class") == "icon" and values.get("aria-hidden"):
                pass  # our icons (templates/chat/icon-*.html); nh3 strips any <svg> a model writes
            elif (
                tag == "svg"
                and "waterfall" in values.get("class", "").split()
                and values.get("role") == "img"
            ):
                pass  # a run's waterfall (chat/waterfall.py): every text in it is escaped
            elif (
                tag == "svg"
                and values.get("class") == "waterfall-key"
                and values.get("aria-hidden")
            ):
                pass  # a sample in the waterfall's legend (chat/waterfall_legend.py): constant
            elif tag in NEVER_IN_TRANSCRIPT and not self.own:
                self.problems.append(f"<{tag}> in the transcript: {values}")
        if tag == "script":
            self.in_script = True
            if not values.get("src", "").startswith(SCRIPT_SOURCES):
                self.problems.append(f"<script> from elsewhere: {values}")
        for name, value in values.items():
            if name.startswith("on"):
                self.problems.append(f"<{tag} {name}={value!r}>")
            elif name == "srcdoc":
                self.problems.append(f"<{tag} srcdoc>")
            elif name in URL_ATTRIBUTES or name == "style":
                # Browsers drop ASCII whitespace and control characters from URLs.
                url = re.sub(r"[\x00-\x20]", "", value).lower()
                scheme = re.match(r"([a-z][a-z0-9+.-]*):", url)
                if name == "style" and "javascript:" in url:
                    self.problems.append(f"<{tag} style={value!r}>")
                elif name != "style" and scheme and scheme.group(1) not in SAFE_SCHEMES:
                    self.problems.append(f"<{tag} {name}={value!r}>")


def audit(html: str) -> Audit:
    parser = Audit()
    parser.feed(html)
    parser.close()
    return parser


@pytest.mark.parametrize("payload", PAYLOADS)
def test_markdown_output_cannot_run_script(payload: str) -> None:
    html = str(markdown(payload))
    found = audit(f'<div id="transcript">{html}</div>')
    assert found.problems == [], html
    assert "<script" not in html.lower(), html
    assert not re.search(r"<[^>]*\s(on[a-z]+|href|src)\s*=\s*[\"']?\s*(javascript:|alert)", html)
    assert found.transcript_tags <= {
        "div", "p", "a", "em", "strong", "code", "pre", "table", "thead", "tbody", "tr", "th",
        "td", "br", "ul", "ol", "li", "blockquote", "del", "hr", "span", "button",
    }, html  # fmt: skip


def test_raw_html_in_markdown_is_shown_as_text() -> None:
    html = str(markdown("Hi <script>alert(1)</script> and <b>bold</b>"))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;b&gt;bold&lt;/b&gt;" in html
    assert '<a href="https://example.com"' in str(markdown("[ok](https://example.com)"))


EVIL_NAME = "<img src=x onerror=alert(1)>"
EVIL_ARGUMENTS = '{"q": "<script>alert(1)</script>", "u": "javascript:alert(1)"}'
EVIL_RESULT = '{"html": "<svg onload=alert(1)>", "more": "</pre><script>alert(1)</script>"}'
EVIL_ERROR = '"><img src=x onerror=alert(1)><script>alert(1)</script>'
EVIL_CALL = agent.ToolCall(id="call_x", name=EVIL_NAME, arguments=EVIL_ARGUMENTS)
DOCUMENT = "\n\n".join(["# Title <script>alert(1)</script>", *PAYLOADS])


def timed(run: Run) -> dict[str, Any]:
    return {
        "started_at": run.started_at,
        "finished_at": run.started_at + timedelta(seconds=0.2),
        "duration": 0.2,
    }


def plant(owner: Any) -> tuple[Conversation, Conversation]:
    """Payloads in every field a page or the admin shows; one conversation has a live run."""
    conversation = make.new_conversation(owner, title="</title><script>alert(1)</script>")
    run = Run.objects.create(
        conversation=conversation,
        created_by=owner,
        status="failed",
        model="<img src=x onerror=alert(1)>",
        error="<script>alert(1)</script>",
        steps=2,
        prompt_tokens=1,
        completion_tokens=1,
        total_tokens=2,
        duration=0.5,
        worker="<svg onload=alert(1)>",
    )
    _, asking, _, _ = transcripts.append_messages(
        conversation,
        [
            agent.ChatMessage(
                role="user", content="<img src=x onerror=alert(1)>\n[x](javascript:alert(1))"
            ),
            agent.ChatMessage(
                role="assistant",
                reasoning="<script>alert(1)</script>",
                tool_calls=(EVIL_CALL,),
            ),
            agent.ChatMessage(role="tool", tool_call_id="call_x", content=EVIL_RESULT),
            agent.ChatMessage(
                role="assistant", content=DOCUMENT, reasoning="<svg onload=alert(1)>"
            ),
        ],
        run=run,
    )
    make.tool_log(
        run, asking, EVIL_CALL, EVIL_RESULT, step=1, error=EVIL_ERROR, **timed(run)
    ).save()  # timed: the run's waterfall draws its name
    ModelCall.objects.create(
        run=run,
        step=1,
        model="<img src=x onerror=alert(1)>",
        request={"messages": [{"role": "user", "content": "<script>alert(1)</script>"}]},
        finish_reason="<b>",
        error=EVIL_ERROR,
    )
    HistoryRepair.objects.create(
        conversation=conversation,
        run=run,
        reason="<script>alert(1)</script>",
        added=[{"role": "tool", "content": EVIL_ERROR}],
        removed=[{"role": "assistant", "content": "<svg onload=alert(1)>"}],
    )
    live = make.new_conversation(owner, title="<svg onload=alert(1)>")
    live_run = Run.objects.create(conversation=live, created_by=owner, model="m")
    transcripts.append_messages(
        live,
        [
            agent.ChatMessage(role="user", content="<script>alert(1)</script>"),
            agent.ChatMessage(role="assistant", content=DOCUMENT, reasoning=EVIL_ERROR),
        ],
        run=live_run,
    )
    ToolCall.objects.create(
        run=live_run, call_id="call_y", name=EVIL_NAME, status="failed", error=EVIL_ERROR
    )
    return conversation, live


@pytest.mark.django_db
def test_payloads_in_stored_rows_render_escaped_on_the_conversation_page() -> None:
    owner = make_user("ada")
    conversation, live = plant(owner)
    web = make.logged_in(owner)

    html = web.get(reverse("chat:conversation_detail", args=[conversation.pk])).content.decode()
    found = audit(html)
    assert found.problems == []
    assert found.transcript_tags >= {"article", "span", "details", "p", "code"}
    # The payloads are on the page, as text.
    assert 'title="&quot;&gt;&lt;img src=x onerror=alert(1)&gt;&lt;script&gt;' in html
    assert "&lt;img src=x onerror=alert(1)&gt;</span>" in html  # the pill's name
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt; · Agent Lab</title>" in html

    html = web.get(reverse("chat:conversation_detail", args=[live.pk])).content.decode()
    found = audit(html)
    assert found.problems == []
    assert "streaming" in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


@pytest.mark.django_db
def test_payloads_in_stored_rows_render_escaped_in_the_admin() -> None:
    owner = make_user("root", is_staff=True, is_superuser=True)
    conversation, _ = plant(owner)
    web = make.logged_in(owner)
    problems = {}
    for url in admin_pages():
        response = web.get(url)
        assert response.status_code == 200, url
        if found := audit(response.content.decode()).problems:
            problems[url] = found
    assert problems == {}
    transcript = web.get(admin_url(Conversation, "change", conversation.pk)).content.decode()
    assert "&lt;img src=x onerror=alert(1)&gt;</a>" in transcript  # the pill's name
    assert '<svg class="waterfall waterfall-wide"' in transcript
    assert "(&lt;img src=x onerror=" in transcript
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in transcript
