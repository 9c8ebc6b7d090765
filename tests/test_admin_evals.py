"""Cases and evaluations in the admin: the pages, the export action, editing an expectation,
and the conversation list's purpose filter."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from chat.evals import records, replay
from chat.models import (
    NO_TOOL,
    Case,
    CaseSet,
    Conversation,
    EvalResult,
    EvalRun,
    ModelCall,
    Purpose,
    Run,
)
from chat.testing import evals as made_for
from chat.testing import factories as make

pytestmark = pytest.mark.django_db(transaction=True)  # the scripted runs write from a thread

SCRIPT = "<script>alert(1)</script>"


def url(model: type, view: str, *args: object) -> str:
    return reverse(f"admin:chat_{model._meta.model_name}_{view}", args=args)


@pytest.fixture
def owner() -> User:
    return make.user("ada")


def evaluated(owner: User) -> EvalRun:
    """An evaluation of two cases on the scripted model: one passes (it searches the cards as
    expected), one fails (it was expected to call no tool)."""
    passing = made_for.search_case(owner)
    failing = made_for.search_case(owner, title="Should not search", expected=NO_TOOL)
    return replay.evaluate(
        [passing, failing], replay.target(), user=owner, case_set=passing.case_set
    )


def test_every_page_of_cases_and_evaluations_renders(staff: Client, owner: User) -> None:
    done = evaluated(owner)
    assert (done.passed, done.failed, done.total) == (1, 1, 2)
    case_set = CaseSet.objects.get()
    for model in (CaseSet, Case, EvalRun, EvalResult):
        assert staff.get(url(model, "changelist")).status_code == 200, model
        for row in model.objects.all():
            assert staff.get(url(model, "change", row.pk)).status_code == 200, model

    listing = staff.get(url(CaseSet, "changelist")).content.decode()
    assert "50% (1 of 2)" in listing and url(EvalRun, "change", done.pk) in listing
    (row,) = staff.get(url(CaseSet, "changelist")).context["cl"].result_list
    assert row.case_count == 2

    page = staff.get(url(CaseSet, "change", case_set.pk)).content.decode()
    for case in Case.objects.all():
        assert url(Case, "change", case.pk) in page
    assert "search_cards" in page and "no tool" in page


def test_an_evaluations_page_lists_its_results_with_links_to_their_runs(
    staff: Client, owner: User
) -> None:
    done = evaluated(owner)
    response = staff.get(url(EvalRun, "change", done.pk))
    page = response.content.decode()
    assert b'name="_save"' not in response.content
    assert "1 / 1 / 2" in page and "50% (1 of 2)" in page
    assert "verdict-passed" in page and "verdict-failed" in page
    assert "expected no tool call, got search_cards" in page
    for result in done.results.all():
        assert result.run is not None
        assert url(Run, "change", result.run_id) in page
        run_page = staff.get(url(Run, "change", result.run_id))
        (calls,) = [
            f for f in run_page.context["inline_admin_formsets"] if f.opts.model is ModelCall
        ]
        assert len(list(calls)) >= 1

    listing = staff.get(url(EvalRun, "changelist")).content.decode()
    assert "Scripted model (offline)" in listing and "50% (1 of 2)" in listing


def test_results_are_filtered_by_verdict_and_evaluation_and_searched(
    staff: Client, owner: User
) -> None:
    done = evaluated(owner)

    def shown(**query: Any) -> list[str]:
        response = staff.get(url(EvalResult, "changelist"), query)
        return [r.case_title for r in response.context["cl"].result_list]

    assert shown(verdict="failed") == ["Should not search"]
    assert shown(verdict="passed") == [made_for.QUESTION]
    assert len(shown(eval_run__id__exact=done.pk)) == 2
    assert shown(q="expected no tool") == ["Should not search"]
    assert shown(q="should not") == ["Should not search"]


def test_conversations_show_and_filter_by_purpose(staff: Client, owner: User) -> None:
    done = evaluated(owner)
    chats = set(Conversation.objects.chats())
    replays = set(Conversation.objects.filter(purpose=Purpose.EVAL))
    assert len(chats) == 2 and len(replays) == 2

    def shown(**query: str) -> set[Conversation]:
        response = staff.get(url(Conversation, "changelist"), query)
        assert response.status_code == 200
        return set(response.context["cl"].result_list)

    # Chats by default: replays are many, and reached from their evaluation.
    assert shown() == chats
    assert shown(purpose__exact="chat") == chats
    assert shown(purpose__exact="eval") == replays
    assert shown(purpose__exact="all") == chats | replays
    assert shown(purpose__exact="all", _facets="1") == chats | replays
    listing = staff.get(url(Conversation, "changelist")).content.decode()
    block = listing.split('data-filter-title="purpose"')[1].split("</details>")[0]
    choices = re.findall(r'<li( class="selected")?>\s*<a href="([^"]*)"[^>]*>([^<]*)</a>', block)
    purposes = {label: (bool(selected), link) for selected, link, label in choices}
    assert purposes["Chat"] == (True, "?")
    assert purposes["Evaluation replay"] == (False, "?purpose__exact=eval")
    assert purposes["All"] == (False, "?purpose__exact=all")

    # From the evaluation to a result, its run, and the replay's page, and back.
    result = done.results.order_by("pk").first()
    assert result is not None and result.run is not None
    assert (
        url(Run, "change", result.run_id)
        in staff.get(url(EvalRun, "change", done.pk)).content.decode()
    )
    replayed = result.run.conversation
    assert (
        url(Conversation, "change", replayed.pk)
        in staff.get(url(Run, "change", result.run_id)).content.decode()
    )
    replay_page = staff.get(url(Conversation, "change", replayed.pk)).content.decode()
    assert url(EvalRun, "change", done.pk) in replay_page


def test_the_export_action_downloads_json_lines_that_import_back(
    staff: Client, owner: User
) -> None:
    case = made_for.search_case(owner)
    other = made_for.search_case(owner, set_name="time")
    action = {"action": "export_as_jsonl", "_selected_action": [case.case_set_id]}

    response = staff.post(url(CaseSet, "changelist"), action)

    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="cases-cards.jsonl"'
    lines = response.content.decode().splitlines()
    assert [json.loads(line)["title"] for line in lines] == [case.title]
    done = records.import_lines(lines, set_name="copy")
    assert done.problems == []
    (copy,) = done.created
    assert records.record(copy) == {**records.record(case), "set": "copy", "source": "imported"}

    both = {"action": "export_as_jsonl", "_selected_action": [case.case_set_id, other.case_set_id]}
    response = staff.post(url(CaseSet, "changelist"), both)
    assert response["Content-Disposition"] == 'attachment; filename="cases.jsonl"'
    assert [json.loads(line)["set"] for line in response.content.decode().splitlines()] == [
        "cards",
        "time",
    ]


def case_form(case: Case, **fields: str) -> dict[str, Any]:
    return {
        "title": case.title,
        "case_set": case.case_set_id,
        "note": case.note,
        "expected": json.dumps(case.expected),
        "_save": "Save",
        **fields,
    }


def test_a_bad_expectation_shows_why_and_changes_nothing(staff: Client, owner: User) -> None:
    case = made_for.search_case(owner)
    kept = case.expected
    page = url(Case, "change", case.pk)
    edit = staff.get(page).content.decode()
    assert "&quot;search_cards&quot;" in edit and "messages" in edit

    for bad, why in [
        ('{"tool_calls": []}', "expected tool_calls must be a non-empty list (or use no_tool)"),
        ('{"tool": "search_cards"}', "an expectation is {&quot;no_tool&quot;: true}"),
        ('{"tool_calls": [{"name": ', "Enter a valid JSON."),
    ]:
        response = staff.post(page, case_form(case, title="Renamed", expected=bad))
        assert response.status_code == 200
        assert why in response.content.decode(), bad
        case.refresh_from_db()
        assert (case.title, case.expected) == (made_for.QUESTION, kept)


def test_a_good_expectation_is_saved_in_its_checked_form(staff: Client, owner: User) -> None:
    case = made_for.search_case(owner)
    expected = '{"tool_calls": [{"name": "get_current_time"}]}'

    response = staff.post(
        url(Case, "change", case.pk), case_form(case, note="Time, not cards.", expected=expected)
    )

    assert response.status_code == 302
    case.refresh_from_db()
    assert case.note == "Time, not cards."
    assert case.expected == {"tool_calls": [{"name": "get_current_time", "arguments": {}}]}
    listing = staff.get(url(Case, "changelist")).content.decode()
    assert "get_current_time({})" in listing


def test_cases_and_sets_are_not_added_in_the_admin(staff: Client, owner: User) -> None:
    made_for.search_case(owner)
    assert staff.get(url(Case, "add")).status_code == 403
    assert staff.get(url(CaseSet, "add")).status_code == 403


def test_the_case_list_filters_by_set_and_source_and_links_the_conversation(
    staff: Client, owner: User
) -> None:
    case = made_for.search_case(owner)
    made_for.search_case(owner, set_name="time", source="given", title="Given one")

    def shown(**query: Any) -> list[str]:
        response = staff.get(url(Case, "changelist"), query)
        return [c.title for c in response.context["cl"].result_list]

    assert shown(case_set__id__exact=case.case_set_id) == [case.title]
    assert shown(source__exact="given") == ["Given one"]
    assert shown(q="given") == ["Given one"]
    listing = staff.get(url(Case, "changelist")).content.decode()
    assert url(Conversation, "change", case.conversation_id) in listing
    assert "after message 0" in listing


def test_titles_and_json_are_escaped(staff: Client, owner: User) -> None:
    case = made_for.search_case(owner, title=SCRIPT, note=SCRIPT)
    Case.objects.filter(pk=case.pk).update(
        messages=[*case.messages, {"role": "user", "content": SCRIPT}]
    )
    done = replay.evaluate([case], replay.target(), user=owner, case_set=case.case_set)
    result = EvalResult.objects.get()
    pages = [
        url(Case, "changelist"),
        url(Case, "change", case.pk),
        url(CaseSet, "change", case.case_set_id),
        url(EvalRun, "change", done.pk),
        url(EvalResult, "changelist"),
        url(EvalResult, "change", result.pk),
    ]
    for page in pages:
        content = staff.get(page).content.decode()
        assert SCRIPT not in content, page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in content, page
