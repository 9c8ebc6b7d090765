"""Save on its own (chat/evals/annotations.py): a note or an expected call needs no Good or Bad
first, an expected call implies the mark, and every problem is found in one pass."""

from __future__ import annotations

import pytest
from django.urls import reverse

from chat.evals.annotations import implied_verdict
from chat.models import NO_TOOL, Annotation, Conversation
from chat.testing import factories as make
from tests.test_annotations import HTMX, alerts, call_of, call_url, made, pressed

__all__ = ["made"]  # the fixture, used by name

pytestmark = pytest.mark.django_db(transaction=True)


def save(conversation: Conversation, **fields: str) -> tuple[int, str]:
    response = make.logged_in(conversation.owner).post(
        call_url(conversation), {"action": "save", **fields}, **HTMX
    )
    return response.status_code, response.content.decode()


def test_an_expected_call_that_differs_is_saved_as_bad(made: Conversation) -> None:
    status, html = save(
        made,
        note="Should ask Tokyo",
        expected_tool="get_current_time",
        expected_arguments='{"timezone": "Asia/Tokyo"}',
    )
    assert status == 200 and alerts(html) == []
    saved = Annotation.objects.get()
    assert saved.verdict == "bad" and saved.note == "Should ask Tokyo"
    assert saved.expected == {"tool": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}
    assert pressed(html, "bad") and "You marked this tool call bad." in html


def test_an_expected_call_the_call_meets_is_saved_as_good(made: Conversation) -> None:
    status, html = save(made, expected_tool="get_current_time", expected_arguments="")
    assert status == 200 and Annotation.objects.get().verdict == "good"
    assert pressed(html, "good")


def test_no_tool_expected_is_bad(made: Conversation) -> None:
    status, _ = save(made, no_tool="on")
    assert status == 200 and Annotation.objects.get().verdict == "bad"
    assert Annotation.objects.get().expected == NO_TOOL


def test_a_good_mark_given_stays_good_whatever_is_expected(made: Conversation) -> None:
    save(made, verdict="good")
    status, html = save(made, current="good", expected_tool="handoff_note")
    assert status == 200 and pressed(html, "good")
    assert Annotation.objects.get().verdict == "good"
    assert Annotation.objects.get().expected == {"tool": "handoff_note", "arguments": {}}


def test_malformed_arguments_are_the_one_line_without_a_mark(made: Conversation) -> None:
    typed = '{"timezone": "Asia/Tokyo"'
    status, html = save(
        made, note="why", expected_tool="get_current_time", expected_arguments=typed
    )
    assert status == 422 and not Annotation.objects.exists()
    [line] = alerts(html)
    assert line.startswith("Expected arguments are not valid JSON:") and "Good or Bad" not in line
    assert f">{typed.replace('"', '&quot;')}</textarea>" in html and ">why</textarea>" in html
    assert 'id="annotate-arguments-call-' in html and 'aria-invalid="true"' in html


def test_every_problem_is_found_in_one_pass(made: Conversation) -> None:
    status, html = save(made, note="x" * 10_001, expected_tool="t", expected_arguments="[]")
    assert status == 422
    assert [line.replace("&quot;", '"') for line in alerts(html)] == [
        "Note: Ensure this value has at most 10000 characters (it has 10001). "
        'Expected arguments must be a JSON object, like {"timezone": "UTC"}.'
    ]


def test_implied_verdict_follows_the_evaluations_rule(made: Conversation) -> None:
    call = call_of(made)  # get_current_time({})
    assert implied_verdict({"tool": "get_current_time", "arguments": {}}, call) == "good"
    assert implied_verdict({"tool": "get_current_time", "arguments": {"a": 1}}, call) == "bad"
    assert implied_verdict({"tool": "search_cards", "arguments": {}}, call) == "bad"
    assert implied_verdict(NO_TOOL, call) == "bad"


def test_the_form_says_what_save_does(made: Conversation) -> None:
    html = make.logged_in(made.owner).get(call_url(made)).content.decode()
    assert "(saved with your Good or Bad)" not in html
    assert "an expected call that differs from this one is saved as Bad" in html


def test_a_note_alone_reads_as_a_note_on_the_page_and_in_the_admin(made: Conversation) -> None:
    status, html = save(made, note="Which zone?")
    assert status == 200 and Annotation.objects.get().verdict == ""
    assert '<span class="annotation-verdict">Note</span>' in html
    assert str(Annotation.objects.get()).startswith("Note on tool call")
    root = make.user("root", is_staff=True, is_superuser=True)
    mark = Annotation.objects.get()
    url = reverse("admin:chat_annotation_change", args=[mark.pk])
    response = make.logged_in(root).post(url, {"verdict": "", "note": "Which zone, Tokyo?"})
    assert response.status_code == 302
    mark.refresh_from_db()
    assert (mark.verdict, mark.note) == ("", "Which zone, Tokyo?")
