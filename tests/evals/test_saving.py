"""Saving a case from the chat (chat/evals/saving.py): the form under a reply, a tool call or
an annotation, what each choice of "what is expected" saves, and who may save."""

from __future__ import annotations

import html as htmllib
import re
from typing import Any

import pytest
from django.template.loader import render_to_string
from django.test import Client
from django.urls import NoReverseMatch, reverse

from chat.evals import cases, saving
from chat.models import NO_TOOL, Annotation, Case, CaseSet, Conversation, Run, ToolCall
from chat.testing import evals as made_for
from chat.testing import factories as make
from tests.test_security import audit

pytestmark = pytest.mark.django_db(transaction=True)
APOS = "\N{RIGHT SINGLE QUOTATION MARK}"
HTMX = {"HTTP_HX_REQUEST": "true"}
SEARCH = 'search_cards({"query": "search the cards for pills"})'
TIME = {"tool_calls": [{"name": "get_current_time", "arguments": {"timezone": "UTC"}}]}


@pytest.fixture
def made() -> Conversation:
    """Ada's conversation: the scripted model searched the cards for pills, then answered."""
    return made_for.searched(make.user("ada"))


def run_of(conversation: Conversation) -> Run:
    return conversation.runs.get()


def call_of(conversation: Conversation) -> ToolCall:
    return run_of(conversation).tool_calls.get()


def reply_url(conversation: Conversation) -> str:
    return reverse("chat:reply_case", args=[conversation.pk, run_of(conversation).pk])


def call_url(conversation: Conversation, annotation: Annotation | None = None) -> str:
    url = reverse("chat:tool_call_case", args=[conversation.pk, call_of(conversation).pk])
    return f"{url}?annotation={annotation.pk}" if annotation is not None else url


def choices(html: str) -> dict[str, str]:
    """The form's "what is expected" radios: value -> label text (its tags and spaces gone)."""
    found = re.findall(
        r'<label class="case-choice[^"]*"><input type="radio" name="expect" value="(\w+)"'
        r"[^>]*>(.*?)</label>",
        html,
        re.S,
    )
    return {
        value: htmllib.unescape(" ".join(re.sub(r"<[^>]+>", "", label).split()))
        for value, label in found
    }


def checked(html: str) -> str:
    found = re.search(r'<input type="radio" name="expect" value="(\w+)" checked', html)
    return found.group(1) if found else ""


def alerts(html: str) -> list[str]:
    return [htmllib.unescape(a) for a in re.findall(r'role="alert">([^<]*)<', html)]


def form(**fields: str) -> dict[str, str]:
    return {"set_name": "cards", "title": "", "expect": "reply", "note": "", **fields}


def bad_mark(conversation: Conversation, author: Any, **fields: Any) -> Annotation:
    return Annotation.objects.create(
        author=author,
        run=run_of(conversation),
        tool_call=call_of(conversation),
        verdict="bad",
        **fields,
    )


# The form.


def test_the_form_of_a_reply_offers_three_choices_and_defaults_to_the_stored_one(
    made: Conversation,
) -> None:
    response = make.logged_in(made.owner).get(reply_url(made), **HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert choices(html) == {
        "reply": f"What the reply did: {SEARCH}",
        "no_tool": "No tool should be called",
        "other": "Another call",
    }
    assert checked(html) == "reply"
    assert 'name="set_name" value="default"' in html
    assert 'name="title" value="search the cards for pills"' in html
    assert '<option value="get_current_time">' in html  # offered, for "Another call"
    assert 'name="csrfmiddlewaretoken"' in html


def test_an_annotation_with_an_expected_call_adds_the_fourth(made: Conversation) -> None:
    bob = make.user("bob")
    bad_mark(made, bob, expected={"tool": "get_current_time", "arguments": {"timezone": "UTC"}})
    for url in (reply_url(made), call_url(made)):
        html = make.logged_in(made.owner).get(url, **HTMX).content.decode()
        assert choices(html)["annotation"] == (
            'What the annotations say: get_current_time({"timezone": "UTC"}) '
            f"(bob{APOS}s Bad mark)"
        )
        assert list(choices(html)) == ["reply", "annotation", "no_tool", "other"]
        assert checked(html) == "reply"


def test_the_viewers_own_annotation_comes_first_else_the_newest(made: Conversation) -> None:
    ada, bob, carol = made.owner, make.user("bob"), make.user("carol")
    bad_mark(made, ada, expected={"no_tool": True})
    bad_mark(made, bob, expected={"tool": "handoff_note", "arguments": {}})
    bad_mark(made, carol, expected={"tool": "get_current_time", "arguments": {}})
    assert (
        f"(ada{APOS}s Bad mark)"
        in choices(make.logged_in(ada).get(call_url(made)).content.decode())["annotation"]
    )
    dave = make.user("dave")
    made.shared = True
    made.save()
    assert (
        f"(carol{APOS}s Bad mark)"
        in choices(make.logged_in(dave).get(call_url(made)).content.decode())["annotation"]
    )


def test_a_mark_without_an_expected_call_is_offered_only_from_its_own_button(
    made: Conversation,
) -> None:
    mark = bad_mark(made, made.owner)
    ada = make.logged_in(made.owner)
    assert "annotation" not in choices(ada.get(call_url(made)).content.decode())
    html = ada.get(call_url(made, mark), **HTMX).content.decode()
    assert "annotation" in choices(html)
    assert re.search(r'value="annotation" disabled aria-describedby="case-refused-', html)
    assert checked(html) == "reply"
    assert "marked Bad without the call expected instead" in html


def test_opened_from_an_annotation_it_follows_that_annotation(made: Conversation) -> None:
    mark = bad_mark(made, make.user("bob"), expected={"tool": "get_current_time", "arguments": {}})
    html = make.logged_in(made.owner).get(call_url(made, mark), **HTMX).content.decode()
    assert checked(html) == "annotation"
    assert f'id="case-set-call-{call_of(made).pk}-note-{mark.pk}"' in html


def test_the_set_name_defaults_to_the_last_one_used(made: Conversation) -> None:
    ada = make.logged_in(made.owner)
    CaseSet.objects.create(name="regressions")
    assert ada.post(reply_url(made), form(set_name="cards"), **HTMX).status_code == 200
    html = ada.get(reply_url(made)).content.decode()
    assert 'name="set_name" value="cards"' in html
    assert '<option value="cards"></option><option value="regressions"></option>' in html


# Each choice saves its expectation and source.


def test_the_stored_decision(made: Conversation) -> None:
    response = make.logged_in(made.owner).post(
        reply_url(made), form(title="Pills", note="kept"), **HTMX
    )
    assert response.status_code == 200
    case = Case.objects.get()
    assert (case.expected, case.source, case.at_message) == (
        {"tool_calls": [{"name": "search_cards", "arguments": {"query": made_for.QUESTION}}]},
        "reply",
        0,
    )
    assert (case.case_set.name, case.title, case.note, case.created_by) == (
        "cards",
        "Pills",
        "kept",
        made.owner,
    )
    html = response.content.decode()
    assert f"Saved as case {case.pk} in “cards”" in html
    if saving.case_url(case, made.owner):
        assert f' · <a href="{saving.case_url(case, made.owner)}">Open</a>' in html
    assert (
        f'<div id="announce" class="visually-hidden" role="status" aria-live="polite" '
        f'hx-swap-oob="true">Saved as case {case.pk} in “cards”.</div>'
    ) in html


def test_the_open_link_goes_to_the_set_page_or_else_the_admin(made: Conversation) -> None:
    case = made_for.search_case(made.owner)
    staff = make.user("root", is_staff=True, is_superuser=True)
    try:
        page = reverse("chat:eval_set", args=[case.case_set_id])
    except NoReverseMatch:
        page = ""
    if page:
        assert saving.case_url(case, made.owner) == saving.case_url(case, staff) == page
    else:
        assert saving.case_url(case, made.owner) == ""  # the admin is not theirs to open
        try:
            admin = reverse("admin:chat_case_change", args=[case.pk])
        except NoReverseMatch:
            admin = ""
        assert saving.case_url(case, staff) == admin


def test_what_the_annotation_says(made: Conversation) -> None:
    mark = bad_mark(
        made, made.owner, expected={"tool": "get_current_time", "arguments": {"timezone": "UTC"}}
    )
    response = make.logged_in(made.owner).post(
        call_url(made, mark), form(expect="annotation", annotation=str(mark.pk)), **HTMX
    )
    assert response.status_code == 200
    case = Case.objects.get()
    assert (case.expected, case.source, case.at_message) == (TIME, "annotation", 0)


def test_no_tool(made: Conversation) -> None:
    make.logged_in(made.owner).post(call_url(made), form(expect="no_tool"), **HTMX)
    case = Case.objects.get()
    assert (case.expected, case.source) == ({"no_tool": True}, "given")


def test_another_call(made: Conversation) -> None:
    make.logged_in(made.owner).post(
        reply_url(made),
        form(expect="other", tool=" get_current_time ", arguments='{"timezone": "UTC"}'),
        **HTMX,
    )
    case = Case.objects.get()
    assert (case.expected, case.source) == (TIME, "given")


def test_the_fields_of_another_call_are_ignored_for_the_other_choices(made: Conversation) -> None:
    make.logged_in(made.owner).post(
        reply_url(made), form(expect="no_tool", tool="x", arguments="{bad"), **HTMX
    )
    assert Case.objects.get().expected == {"no_tool": True}


# Refusals: one line, 422, everything typed kept.


def test_bad_arguments_are_refused_and_kept(made: Conversation) -> None:
    typed = '{"timezone": "UTC",}'
    response = make.logged_in(made.owner).post(
        reply_url(made),
        form(expect="other", tool="get_current_time", arguments=typed, note="my note", title="T"),
        **HTMX,
    )
    assert response.status_code == 422
    html = response.content.decode()
    (line,) = alerts(html)
    assert re.fullmatch(r"Expected arguments are not valid JSON: .* line 1, column 20\.", line)
    assert re.search(
        r'name="arguments"[^>]*aria-invalid="true"[^>]*>'
        + re.escape(htmllib.escape(typed))
        + "</textarea>",
        html,
    )
    assert ">my note</textarea>" in html and 'name="title" value="T"' in html
    assert checked(html) == "other"
    assert not Case.objects.exists()


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        ({"set_name": "  "}, "Name the case set."),
        ({"set_name": "x" * 101}, "Case set: Ensure this value has at most 100 characters"),
        ({"expect": "maybe"}, "Choose what is expected next."),
        ({"expect": "other", "tool": ""}, "Name the tool of the other call."),
        ({"expect": "other", "tool": "t", "arguments": "[1]"}, "Expected arguments must be"),
        ({"expect": "annotation"}, saving.GONE),
    ],
)
def test_other_refusals(made: Conversation, fields: dict[str, str], line: str) -> None:
    response = make.logged_in(made.owner).post(reply_url(made), form(**fields), **HTMX)
    assert response.status_code == 422
    (said,) = alerts(response.content.decode())
    assert said.startswith(line)
    assert not Case.objects.exists() and not CaseSet.objects.exists()


def test_a_bad_mark_without_an_expected_call_is_refused_with_its_reason(
    made: Conversation,
) -> None:
    mark = bad_mark(made, made.owner, note="wrong")
    response = make.logged_in(made.owner).post(
        call_url(made, mark), form(expect="annotation", annotation=str(mark.pk), note="n"), **HTMX
    )
    assert response.status_code == 422
    assert alerts(response.content.decode()) == [
        "This call is marked Bad without the call expected instead: add the expected call "
        "(or “No tool should be called”) to the annotation first."
    ]
    assert ">n</textarea>" in response.content.decode()
    assert not Case.objects.exists()


def test_a_reply_still_being_written_is_refused(made: Conversation) -> None:
    running = Run.objects.create(conversation=made, created_by=made.owner)
    url = reverse("chat:reply_case", args=[made.pk, running.pk])
    for response in (
        make.logged_in(made.owner).get(url, **HTMX),
        make.logged_in(made.owner).post(url, form(), **HTMX),
    ):
        assert response.status_code == 409
        assert alerts(response.content.decode()) == [saving.STILL_RUNNING]
    assert not Case.objects.exists()


def test_without_htmx_a_post_goes_back_to_the_page(made: Conversation) -> None:
    ada = make.logged_in(made.owner)
    response = ada.post(reply_url(made), form())
    detail = reverse("chat:conversation_detail", args=[made.pk])
    assert (response.status_code, response["Location"]) == (
        302,
        f"{detail}#reply-{run_of(made).pk}",
    )
    assert Case.objects.count() == 1
    response = ada.post(reply_url(made), form(set_name=""), follow=True)
    assert "Name the case set." in response.content.decode()


# Who may save.


def test_a_reader_of_a_shared_conversation_saves_a_case_and_changes_nothing(
    made: Conversation,
) -> None:
    made.shared = True
    made.save()
    before = list(made.messages.values_list("index", "role", "content"))
    bob = make.user("bob")
    response = make.logged_in(bob).post(call_url(made), form(expect="no_tool"), **HTMX)
    assert response.status_code == 200
    case = Case.objects.get()
    assert (case.created_by, case.conversation) == (bob, made)
    assert list(made.messages.values_list("index", "role", "content")) == before
    assert made.runs.count() == 1


def test_another_users_private_conversation_is_404(made: Conversation) -> None:
    mallory = make.logged_in(make.user("mallory"))
    for url in (reply_url(made), call_url(made)):
        assert mallory.get(url, **HTMX).status_code == 404
        assert mallory.post(url, form(), **HTMX).status_code == 404
    assert not Case.objects.exists()


def test_a_tool_call_is_reached_only_through_its_own_conversation(made: Conversation) -> None:
    mine = made_for.searched(make.user("mallory"), "Mine")
    url = reverse("chat:tool_call_case", args=[mine.pk, call_of(made).pk])
    assert make.logged_in(mine.owner).post(url, form(), **HTMX).status_code == 404
    url = reverse("chat:reply_case", args=[mine.pk, run_of(made).pk])
    assert make.logged_in(mine.owner).post(url, form(), **HTMX).status_code == 404
    assert not Case.objects.exists()


def test_login_is_required(made: Conversation) -> None:
    for url in (reply_url(made), call_url(made)):
        for response in (Client().get(url), Client().post(url, form())):
            assert response.status_code == 302 and "/login/" in response["Location"]
    assert not Case.objects.exists()


# The page.


def test_every_finished_reply_and_tool_call_offers_save_as_case(made: Conversation) -> None:
    bad_mark(made, make.user("bob"), expected={"no_tool": True})
    ada = make.logged_in(made.owner)
    page = ada.get(reverse("chat:conversation_detail", args=[made.pk])).content.decode()
    run = run_of(made)
    assert re.search(
        rf'<button type="button" class="case-open" id="case-open-run-{run.pk}" '
        rf'aria-expanded="false" '
        rf'aria-controls="case-slot-run-{run.pk}" hx-get="{re.escape(reply_url(made))}"',
        page,
    )
    assert f'<div class="case-slot" id="case-slot-run-{run.pk}" hidden></div>' in page
    detail = ada.get(reverse("chat:tool_call_detail", args=[made.pk, call_of(made).pk]))
    panel = detail.content.decode()
    assert f'hx-get="{call_url(made)}"' in panel
    mark = Annotation.objects.get()
    assert f'hx-get="{call_url(made, mark)}"' in panel
    assert f'aria-label="Save as case, following bob{APOS}s mark"' in panel


def test_a_hostile_title_set_and_note_are_escaped(made: Conversation) -> None:
    hostile = '<img src=x onerror=alert(1)>"><script>alert(2)</script>'
    made.messages.filter(index=0).update(content=hostile)
    ada = make.logged_in(made.owner)
    html = ada.get(reply_url(made), **HTMX).content.decode()
    assert audit(html).problems == [] and "<script>alert" not in html and "<img" not in html
    response = ada.post(
        reply_url(made), form(set_name=hostile, title=hostile, note=hostile), **HTMX
    )
    html = response.content.decode()
    assert audit(html).problems == [] and "<script>alert" not in html and "<img" not in html
    assert Case.objects.get().title == " ".join(hostile.split())
    refused = ada.post(
        reply_url(made),
        form(title=hostile, note=hostile, expect="other", tool=hostile, arguments=hostile),
        **HTMX,
    ).content.decode()
    assert (
        audit(refused).problems == [] and "<script>alert" not in refused and "<img" not in refused
    )


def test_a_moment_after_a_tool_result_says_why_it_expects_no_tool(made: Conversation) -> None:
    run = run_of(made)
    shown = saving.Saving(run, None, None, rows=list(made.messages.active())[:3])
    shown.stored, shown.values = dict(NO_TOOL), {"expect": "reply"}
    assert shown.rows[-1].role == "tool" and shown.why == cases.WHY_NO_TOOL
    html = render_to_string("chat/case_form.html#form", {"s": shown})
    assert f'<p class="case-why muted" id="case-why-run-{run.pk}">{cases.WHY_NO_TOOL}</p>' in html
    assert f'aria-describedby="case-why-run-{run.pk}"' in html
    shown.rows = shown.rows[:1]  # after the question: nothing to explain
    assert "case-why" not in render_to_string("chat/case_form.html#form", {"s": shown})
