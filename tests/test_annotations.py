"""Annotations (chat/models/annotations.py, chat/evals/annotations.py): a team member marks a
reply or a tool call Good or Bad, with a note and the call they expected; the page shows them."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from chat import fragments
from chat.agent.scripted import ScriptedChatClient
from chat.evals.annotations import NOTHING, Judgements, offered_tools
from chat.models import NO_TOOL, Annotation, Conversation, Run, ToolCall, expected_call
from chat.testing import factories as make
from chat.turns import conversation_turns
from tests.test_security import audit

pytestmark = pytest.mark.django_db(transaction=True)
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def made() -> Conversation:
    """Ada's conversation: one finished reply that called get_current_time once."""
    conversation = make.conversation(
        make.user("ada"), "Time", enabled_tools=["get_current_time", "handoff_note"]
    )
    make.run_turn(conversation, "what time is it?", ScriptedChatClient())
    return conversation


def run_of(conversation: Conversation) -> Run:
    return conversation.runs.get()


def call_of(conversation: Conversation) -> ToolCall:
    return run_of(conversation).tool_calls.get()


def reply_url(conversation: Conversation) -> str:
    return reverse("chat:reply_annotation", args=[conversation.pk, run_of(conversation).pk])


def call_url(conversation: Conversation) -> str:
    return reverse("chat:tool_call_annotation", args=[conversation.pk, call_of(conversation).pk])


def page(client: Client, conversation: Conversation) -> str:
    response = client.get(reverse("chat:conversation_detail", args=[conversation.pk]))
    assert response.status_code == 200
    return response.content.decode()


def pressed(html: str, verdict: str) -> bool:
    button = re.search(rf'<button[^>]*class="action mark mark-{verdict}"[^>]*>', html)
    assert button is not None, html
    return 'aria-pressed="true"' in button.group(0)


def alerts(html: str) -> list[str]:
    return re.findall(r'role="alert">([^<]*)<', html)


# The model's rules.


def test_one_annotation_per_author_and_target(made: Conversation) -> None:
    ada, bob = made.owner, make.user("bob")
    run, call = run_of(made), call_of(made)
    Annotation.objects.create(author=ada, run=run, verdict="good")
    Annotation.objects.create(author=ada, run=run, tool_call=call, verdict="bad")
    Annotation.objects.create(author=bob, run=run, verdict="bad")
    Annotation.objects.create(author=bob, run=run, tool_call=call, verdict="bad")
    for tool_call in (None, call):
        with pytest.raises(IntegrityError), transaction.atomic():
            Annotation.objects.create(author=ada, run=run, tool_call=tool_call, verdict="bad")
    assert Annotation.objects.count() == 4
    twin = Annotation(author=ada, run=run, verdict="bad")
    with pytest.raises(ValidationError, match="already annotated this reply"):
        twin.full_clean()


def test_only_a_tool_call_has_an_expected_call(made: Conversation) -> None:
    run = run_of(made)
    with pytest.raises(IntegrityError), transaction.atomic():
        Annotation.objects.create(author=made.owner, run=run, verdict="bad", expected=NO_TOOL)
    wrong = Annotation(author=made.owner, run=run, verdict="bad", expected=NO_TOOL)
    with pytest.raises(ValidationError, match="Only a tool call has an expected call"):
        wrong.full_clean()


def test_a_tool_call_of_another_run_is_refused(made: Conversation) -> None:
    other = make.conversation(made.owner, enabled_tools=["get_current_time"])
    make.run_turn(other, "what time is it?", ScriptedChatClient())
    stray = Annotation(author=made.owner, run=run_of(made), tool_call=call_of(other), verdict="bad")
    with pytest.raises(ValidationError, match="belongs to another run"):
        stray.full_clean()


def test_stored_expected_calls_have_one_of_two_shapes(made: Conversation) -> None:
    run, call = run_of(made), call_of(made)
    for good in (None, NO_TOOL, {"tool": "handoff_note", "arguments": {"note": "hi"}}):
        Annotation(
            author=made.owner, run=run, tool_call=call, verdict="bad", expected=good
        ).full_clean()
    for bad in ({"tool": "x"}, {"tool": "", "arguments": {}}, {"tool": "x", "arguments": []}, [1]):
        annotation = Annotation(
            author=made.owner, run=run, tool_call=call, verdict="bad", expected=bad
        )
        with pytest.raises(ValidationError, match="An expected call is"):
            annotation.full_clean()


def test_expected_call_reads_what_the_form_says() -> None:
    assert expected_call(tool="", arguments="", no_tool=False) is None
    assert expected_call(tool="", arguments="  ", no_tool=True) == {"no_tool": True}
    assert expected_call(tool=" note ", arguments="", no_tool=False) == {
        "tool": "note",
        "arguments": {},
    }
    assert expected_call(tool="t", arguments='{"a": [1]}', no_tool=False) == {
        "tool": "t",
        "arguments": {"a": [1]},
    }
    problems = {
        ("t", "{bad", False): "not valid JSON: expecting property name",
        ("t", "[1, 2]", False): "must be a JSON object",
        ("t", '"text"', False): "must be a JSON object",
        ("", '{"a": 1}', False): "Name the expected tool",
        ("t", "", True): "not both",
    }
    for (tool, arguments, no_tool), message in problems.items():
        with pytest.raises(ValidationError, match=message) as caught:
            expected_call(tool=tool, arguments=arguments, no_tool=no_tool)
        assert len(caught.value.messages) == 1 and "\n" not in caught.value.messages[0]


def test_annotations_go_with_their_run_and_their_author(made: Conversation) -> None:
    bob = make.user("bob")
    Annotation.objects.create(author=bob, run=run_of(made), verdict="bad")
    Annotation.objects.create(author=made.owner, run=run_of(made), verdict="good")
    bob.delete()
    assert list(Annotation.objects.values_list("verdict", flat=True)) == ["good"]
    made.delete()
    assert not Annotation.objects.exists()


def test_readable_by_follows_the_conversation(made: Conversation) -> None:
    annotation = Annotation.objects.create(author=made.owner, run=run_of(made), verdict="good")
    bob = make.user("bob")
    assert list(Annotation.objects.readable_by(made.owner)) == [annotation]
    assert list(Annotation.objects.readable_by(bob)) == []
    made.shared = True
    made.save()
    assert list(Annotation.objects.readable_by(bob)) == [annotation]


# Marking from the chat: create, update, clear.


def test_mark_a_reply_then_change_it_then_clear_it(made: Conversation) -> None:
    ada = make.logged_in(made.owner)

    response = ada.post(reply_url(made), {"verdict": "good", "note": ""}, **HTMX)
    html = response.content.decode()
    assert response.status_code == 200
    assert pressed(html, "good") and not pressed(html, "bad")
    assert "Good 1" in html and "You marked this reply good." in html
    assert 'id="announce"' in html and 'hx-swap-oob="true"' in html
    (row,) = Annotation.objects.all()
    assert (row.author, row.run, row.tool_call, row.verdict, row.note) == (
        made.owner,
        run_of(made),
        None,
        "good",
        "",
    )

    response = ada.post(
        reply_url(made), {"verdict": "bad", "note": "Too vague.\r\nSay the zone."}, **HTMX
    )
    html = response.content.decode()
    assert response.status_code == 200 and pressed(html, "bad") and not pressed(html, "good")
    (same,) = Annotation.objects.all()
    assert same.pk == row.pk and (same.verdict, same.note) == ("bad", "Too vague.\nSay the zone.")
    assert same.updated_at > row.updated_at and same.created_at == row.created_at
    assert "Too vague.<br>Say the zone." in html and "Bad 1" in html

    # Save keeps the current verdict and changes the note.
    response = ada.post(
        reply_url(made), {"action": "save", "current": "bad", "note": "Vague."}, **HTMX
    )
    assert response.status_code == 200
    assert Annotation.objects.get().note == "Vague."

    # The pressed button clears, and the note typed stays in the form.
    response = ada.post(
        reply_url(made), {"action": "clear", "current": "bad", "note": "Vague."}, **HTMX
    )
    html = response.content.decode()
    assert response.status_code == 200 and not Annotation.objects.exists()
    assert not pressed(html, "good") and not pressed(html, "bad")
    assert ">Vague.</textarea>" in html and "is cleared" in html
    assert "Bad 1" not in html


def test_a_note_alone_is_saved_and_nothing_at_all_is_refused(made: Conversation) -> None:
    ada = make.logged_in(made.owner)
    response = ada.post(
        reply_url(made), {"action": "save", "current": "", "note": "Half a thought <b>"}, **HTMX
    )
    html = response.content.decode()
    assert response.status_code == 200 and alerts(html) == []
    saved = Annotation.objects.get()
    assert (saved.verdict, saved.note) == ("", "Half a thought <b>")
    assert "Your note on this reply is saved." in html
    assert not pressed(html, "good") and not pressed(html, "bad")
    assert "Half a thought &lt;b&gt;" in html and "Good 1" not in html and "Bad 1" not in html

    # Emptied and saved again, the note is taken back; with nothing before, one line says why.
    response = ada.post(reply_url(made), {"action": "save", "current": "", "note": ""}, **HTMX)
    assert response.status_code == 200 and not Annotation.objects.exists()
    response = ada.post(reply_url(made), {"action": "save", "current": "", "note": " "}, **HTMX)
    assert response.status_code == 422
    assert alerts(response.content.decode()) == [NOTHING]


def test_mark_a_tool_call_with_the_expected_call(made: Conversation) -> None:
    ada = make.logged_in(made.owner)
    response = ada.post(
        call_url(made),
        {
            "verdict": "bad",
            "note": "Should leave a note.",
            "expected_tool": "handoff_note",
            "expected_arguments": '{"note": "call Sam"}',
        },
        **HTMX,
    )
    html = response.content.decode()
    assert response.status_code == 200 and pressed(html, "bad")
    (row,) = Annotation.objects.all()
    assert row.tool_call == call_of(made) and row.run == run_of(made)
    assert row.expected == {"tool": "handoff_note", "arguments": {"note": "call Sam"}}
    assert "You marked this tool call bad." in html
    # The pill's marker follows, out of band.
    assert re.search(
        r'<span class="call-mark call-mark-bad" id="call-mark-\d+"[^>]*hx-swap-oob', html
    )
    assert "marked bad" in html
    assert "Expected:" in html and "handoff_note" in html

    response = ada.post(call_url(made), {"verdict": "bad", "no_tool": "on"}, **HTMX)
    assert response.status_code == 200
    assert Annotation.objects.get().expected == {"no_tool": True}
    assert "no tool call" in response.content.decode()

    response = ada.post(call_url(made), {"verdict": "good"}, **HTMX)
    assert Annotation.objects.get().expected is None


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        (
            {"expected_tool": "handoff_note", "expected_arguments": '{"note": "x",}'},
            "Expected arguments are not valid JSON: expecting property name enclosed in double "
            "quotes at line 1, column 14.",
        ),
        (
            {"expected_tool": "handoff_note", "expected_arguments": '["x"]'},
            'Expected arguments must be a JSON object, like {"timezone": "UTC"}.',
        ),
        ({"expected_arguments": "{}"}, "Name the expected tool for these arguments."),
        (
            {"expected_tool": "x", "no_tool": "on"},
            "Either a tool call or “No tool should be called”, not both.",
        ),
        ({"verdict": "meh"}, "Select a valid choice. meh is not one of the available choices."),
    ],
)
def test_bad_input_is_refused_with_one_line_and_kept(
    made: Conversation, fields: dict[str, str], line: str
) -> None:
    ada = make.logged_in(made.owner)
    ada.post(call_url(made), {"verdict": "good", "note": "first"}, **HTMX)
    before = Annotation.objects.get()

    data = {"verdict": "bad", "note": "second <i>", **fields}
    response = ada.post(call_url(made), data, **HTMX)
    html = response.content.decode()

    assert response.status_code == 422
    assert [text.replace("&quot;", '"').replace("&#x27;", "'") for text in alerts(html)] == [line]
    assert ">second &lt;i&gt;</textarea>" in html
    if "expected_arguments" in fields:
        typed = fields["expected_arguments"].replace('"', "&quot;")
        assert f">{typed}</textarea>" in html
    assert 'aria-expanded="true"' in html and 'id="annotate-panel-call-' in html
    after = Annotation.objects.get()
    assert (after.verdict, after.note, after.expected, after.updated_at) == (
        before.verdict,
        before.note,
        before.expected,
        before.updated_at,
    )


def test_a_reply_has_no_expected_call(made: Conversation) -> None:
    response = make.logged_in(made.owner).post(
        reply_url(made), {"verdict": "bad", "expected_tool": "x", "no_tool": "on"}, **HTMX
    )
    assert response.status_code == 200
    assert Annotation.objects.get().expected is None
    assert 'name="expected_tool"' not in response.content.decode()


def test_a_reply_still_being_written_is_not_judged(made: Conversation) -> None:
    running = Run.objects.create(conversation=made, created_by=made.owner)
    url = reverse("chat:reply_annotation", args=[made.pk, running.pk])
    response = make.logged_in(made.owner).post(url, {"verdict": "bad"}, **HTMX)
    assert response.status_code == 409
    assert alerts(response.content.decode()) == [
        "The reply is still being written: judge it once it is finished."
    ]
    assert not Annotation.objects.exists()


def test_without_htmx_a_post_goes_back_to_the_page(made: Conversation) -> None:
    ada = make.logged_in(made.owner)
    response = ada.post(reply_url(made), {"verdict": "good"})
    detail = reverse("chat:conversation_detail", args=[made.pk])
    assert response.status_code == 302
    assert response["Location"] == f"{detail}#reply-{run_of(made).pk}"
    assert Annotation.objects.get().verdict == "good"
    response = ada.post(call_url(made), {"verdict": "bad", "expected_arguments": "[]"}, follow=True)
    assert "Name the expected tool for these arguments." in response.content.decode()


def test_the_block_on_its_own(made: Conversation) -> None:
    Annotation.objects.create(author=made.owner, run=run_of(made), verdict="bad", note="hm")
    response = make.logged_in(made.owner).get(reply_url(made))
    assert response.status_code == 200
    html = response.content.decode()
    assert pressed(html, "bad") and "hm" in html and "hx-trigger" not in html


# Who may annotate.


def test_anonymous_users_are_sent_to_log_in(made: Conversation) -> None:
    for url in (reply_url(made), call_url(made)):
        response = Client().post(url, {"verdict": "bad"})
        assert response.status_code == 302 and "/login/" in response["Location"]
    assert not Annotation.objects.exists()


def test_an_outsider_gets_404_on_a_private_conversation(made: Conversation) -> None:
    Annotation.objects.create(author=made.owner, run=run_of(made), verdict="bad", note="secret")
    mallory = make.logged_in(make.user("mallory"))
    for url in (reply_url(made), call_url(made)):
        assert mallory.get(url).status_code == 404
        assert mallory.post(url, {"verdict": "good"}, **HTMX).status_code == 404
        assert mallory.post(url, {"action": "clear"}, **HTMX).status_code == 404
    assert list(Annotation.objects.values_list("author__username", "verdict")) == [("ada", "bad")]


def test_a_tool_call_is_reached_only_through_its_own_conversation(made: Conversation) -> None:
    mine = make.conversation(make.user("mallory"), enabled_tools=["get_current_time"])
    make.run_turn(mine, "what time is it?", ScriptedChatClient())
    mallory = make.logged_in(mine.owner)
    crossed = [
        reverse("chat:tool_call_annotation", args=[mine.pk, call_of(made).pk]),
        reverse("chat:reply_annotation", args=[mine.pk, run_of(made).pk]),
    ]
    for url in crossed:
        assert mallory.post(url, {"verdict": "bad"}, **HTMX).status_code == 404
    assert not Annotation.objects.exists()


def test_a_teammate_annotates_a_shared_conversation_which_stays_as_it_is(
    made: Conversation,
) -> None:
    made.shared = True
    made.save()
    made.refresh_from_db()
    touched = made.updated_at
    Annotation.objects.create(author=made.owner, run=run_of(made), verdict="good", note="fine")
    bob = make.logged_in(make.user("bob"))

    html = page(bob, made)
    assert "Good 1" in html and not pressed(html, "good")  # ada's, not bob's
    response = bob.post(reply_url(made), {"verdict": "bad", "note": "Not for me."}, **HTMX)
    assert response.status_code == 200 and pressed(response.content.decode(), "bad")
    response = bob.post(call_url(made), {"verdict": "bad", "no_tool": "on"}, **HTMX)
    assert response.status_code == 200
    # Clear takes bob's own mark only.
    bob.post(reply_url(made), {"action": "clear"}, **HTMX)
    assert sorted(Annotation.objects.values_list("author__username", "tool_call", "verdict")) == [
        ("ada", None, "good"),
        ("bob", call_of(made).pk, "bad"),
    ]
    made.refresh_from_db()
    assert made.updated_at == touched and made.title == "Time"


def test_annotating_needs_a_csrf_token(made: Conversation) -> None:
    ada = make.logged_in(made.owner, csrf=True)
    assert ada.post(reply_url(made), {"verdict": "bad"}, **HTMX).status_code == 403
    html = page(ada, made)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert token is not None
    response = ada.post(
        reply_url(made), {"verdict": "bad"}, HTTP_X_CSRFTOKEN=token.group(1), **HTMX
    )
    assert response.status_code == 200 and Annotation.objects.count() == 1


# What the page shows.


def test_the_page_shows_marks_notes_and_the_pills_marker(made: Conversation) -> None:
    bob = make.user("bob")
    run, call = run_of(made), call_of(made)
    Annotation.objects.create(author=made.owner, run=run, verdict="bad", note="Wrong zone <script>")
    Annotation.objects.create(author=bob, run=run, verdict="good")
    Annotation.objects.create(author=bob, run=run, verdict="bad", tool_call=call, expected=NO_TOOL)

    html = page(make.logged_in(made.owner), made)
    assert pressed(html, "bad") and not pressed(html, "good")
    assert "Good 1 · Bad 1" in html and 'title="Good: bob · Bad: ada"' in html
    assert "Wrong zone &lt;script&gt;" in html and "<script>" not in html.split("</head>")[1]
    assert 'aria-label="Mark reply good"' in html and 'aria-label="Mark reply bad"' in html
    assert f'id="call-mark-{call.pk}"' in html and "call-mark-bad" in html
    assert '<span class="visually-hidden">marked bad</span>' in html
    assert audit(html).problems == []

    detail = (
        make.logged_in(made.owner)
        .get(reverse("chat:tool_call_detail", args=[made.pk, call.pk]))
        .content.decode()
    )
    assert 'aria-label="Mark tool call bad"' in detail and "Bad 1" in detail
    assert "Expected: no tool call" in detail and "bob" in detail
    assert '<option value="get_current_time">' in detail and 'value="handoff_note"' in detail
    assert not pressed(detail, "bad")  # bob's mark, ada reads it


def test_an_unannotated_reply_shows_the_controls_and_no_summary(made: Conversation) -> None:
    html = page(make.logged_in(made.owner), made)
    assert not pressed(html, "good") and not pressed(html, "bad")
    assert "annotate-summary" not in html and "annotation-list" not in html
    assert re.search(r'<span class="call-mark" id="call-mark-\d+"></span>', html)


def test_frames_for_every_socket_carry_no_ones_marks(made: Conversation) -> None:
    """The transcript a version switch pushes to every tab is rendered for no one: the summary
    shows, no button is pressed, and an annotated block fetches the reader's own."""
    Annotation.objects.create(author=made.owner, run=run_of(made), verdict="bad")
    frame = fragments.transcript(made)
    assert "Bad 1" in frame and 'hx-trigger="load"' in frame
    assert not pressed(frame, "bad")
    assert "csrfmiddlewaretoken" not in frame  # the page's script sends the page's token
    assert f'hx-get="{reply_url(made)}"' in frame


def test_page_queries_do_not_grow_with_annotations(made: Conversation) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    ada = make.logged_in(made.owner)

    def count() -> int:
        with CaptureQueriesContext(connection) as captured:
            page(ada, made)
        return len(captured.captured_queries)

    Annotation.objects.create(author=made.owner, run=run_of(made), verdict="bad")
    few = count()
    for n in range(4):
        teammate = make.user(f"t{n}")
        Annotation.objects.create(author=teammate, run=run_of(made), verdict="good")
        Annotation.objects.create(
            author=teammate, run=run_of(made), tool_call=call_of(made), verdict="bad"
        )
    assert count() == few
    turns = conversation_turns(made)
    assert len(turns[0].annotations) == 9


def test_offered_tools_are_those_of_the_request_that_made_the_call(made: Conversation) -> None:
    assert offered_tools(call_of(made)) == ["get_current_time", "handoff_note"]
    call = call_of(made)
    call.run.model_calls.all().delete()
    assert offered_tools(call) == ["get_current_time"]


def test_judgements_count_and_pick_the_readers_own(made: Conversation) -> None:
    bob = make.user("bob")
    run = run_of(made)
    rows = [
        Annotation.objects.create(author=made.owner, run=run, verdict="good"),
        Annotation.objects.create(author=bob, run=run, verdict="good"),
        Annotation.objects.create(author=bob, run=run, tool_call=call_of(made), verdict="bad"),
    ]
    judged = Judgements.of(run, None, rows, bob)
    assert (judged.good, judged.bad, judged.summary) == (2, 0, "Good 2")
    assert judged.mine == rows[1] and not judged.refresh
    nobody = Judgements.of(run, None, rows, None)
    assert nobody.mine is None and nobody.refresh
    on_call = Judgements.of(run, call_of(made), rows, None)
    assert (on_call.summary, on_call.mark, on_call.key) == (
        "Bad 1",
        "bad",
        f"call-{rows[2].tool_call_id}",
    )


def test_the_refused_field_is_the_one_marked_invalid(made: Conversation) -> None:
    ada = make.logged_in(made.owner)
    cases = {
        "annotate-arguments-call-": {
            "verdict": "bad",
            "expected_tool": "t",
            "expected_arguments": "[]",
        },
        "annotate-tool-call-": {"verdict": "bad", "expected_arguments": "{}"},
        "annotate-note-call-": {"verdict": "bad", "note": "x" * 10_001},
    }
    for field, data in cases.items():
        html = ada.post(call_url(made), data, **HTMX).content.decode()
        invalid = re.findall(r'id="([a-z-]+)\d+"[^>]*aria-invalid="true"', html)
        assert invalid == [field], (field, invalid)
    html = ada.post(call_url(made), {"action": "save", "note": ""}, **HTMX).content.decode()
    invalid = re.findall(r'id="([a-z-]+)\d+"[^>]*aria-invalid="true"', html)
    assert invalid == ["annotate-note-call-"] and alerts(html) == [NOTHING]
    note = ada.post(call_url(made), {"verdict": "bad", "note": "x" * 10_001}, **HTMX)
    assert alerts(note.content.decode()) == [
        "Note: Ensure this value has at most 10000 characters (it has 10001)."
    ]


def test_payloads_in_annotations_render_escaped_in_the_admin(made: Conversation) -> None:
    evil = "<img src=x onerror=alert(1)><script>alert(1)</script>"
    Annotation.objects.create(author=made.owner, run=run_of(made), verdict="bad", note=evil)
    Annotation.objects.create(
        author=made.owner,
        run=run_of(made),
        tool_call=call_of(made),
        verdict="bad",
        note=evil,
        expected={"tool": evil, "arguments": {"q": evil}},
    )
    root = make.logged_in(make.user("root", is_staff=True, is_superuser=True))
    pages = [
        reverse("admin:chat_annotation_changelist"),
        reverse("admin:chat_run_change", args=[run_of(made).pk]),
        *(
            reverse("admin:chat_annotation_change", args=[pk])
            for pk in Annotation.objects.values_list("pk", flat=True)
        ),
    ]
    for url in pages:
        response = root.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert audit(html).problems == [], url
        assert "&lt;img src=x onerror=alert(1)&gt;" in html, url
    chat = page(make.logged_in(made.owner), made)
    assert audit(chat).problems == [] and "&lt;script&gt;alert(1)&lt;/script&gt;" in chat
