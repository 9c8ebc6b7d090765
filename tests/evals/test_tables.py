"""The evaluation page's table (chat/evals/tables.py): one row per case ("2/3 passed"), the
case's verdict, reasons and means, its attempts folded under it; and the final answer shown."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from chat.evals import cases, replay, tables
from chat.models import Case, EvalResult, EvalRun
from chat.testing import evals as made_for
from chat.testing import factories as make
from tests.test_security import audit

pytestmark = pytest.mark.django_db(transaction=True)
WRONG = "expected search_cards, got get_current_time"


@pytest.fixture
def ada() -> Any:
    return make.user("ada")


def result(eval_run: EvalRun, case: Case, attempt: int, verdict: str, **more: Any) -> EvalResult:
    got = {"tool_calls": [{"name": "search_cards", "arguments": {}}]}
    if verdict == "failed":
        got = {"tool_calls": [{"name": "get_current_time", "arguments": {}}]}
    fields: dict[str, Any] = {
        "case_title": case.title,
        "expected": case.expected,
        "got": got,
        "reason": WRONG if verdict == "failed" else "",
        "latency": 1.0,
        "prompt_tokens": 20,
        "completion_tokens": 10,
    }
    return EvalResult.objects.create(
        eval_run=eval_run, case=case, attempt=attempt, verdict=verdict, **(fields | more)
    )


def test_one_row_per_case_with_its_attempts(ada: Any) -> None:
    first = made_for.search_case(ada)
    second = made_for.search_case(ada, title="Second")
    eval_run = replay.create_eval_run(
        [first, second], replay.target(), user=ada, case_set=first.case_set, repeat=3
    )
    result(eval_run, first, 1, "passed", latency=0.5)
    result(eval_run, first, 2, "failed", latency=1.5, completion_tokens=40)
    result(eval_run, first, 3, "passed")
    result(eval_run, second, 1, "passed")

    shown = tables.table(eval_run)
    top, other = shown.rows
    assert [slot.attempt for slot in top.slots] == [1, 2, 3] and top.folded
    assert (top.tally_text, top.verdict, top.state, top.reason) == (
        "2/3 passed",
        "failed",
        "failed",
        WRONG,
    )
    assert top.latency == pytest.approx(1.0) and top.tokens == pytest.approx(40)
    assert "get_current_time({}) x1" in top.decided and "search_cards({}) x2" in top.decided
    assert (other.tally_text, other.missing, other.state) == ("1/3 passed", 2, "passed")

    page = make.logged_in(ada).get(reverse("chat:evals:run", args=[eval_run.pk])).content.decode()
    assert page.count('<tbody id="case-') == 2 and page.count('class="eval-attempt"') == 6
    assert "2/3 passed" in page and "1/3 passed" in page and "2 to come" in page
    assert page.count(WRONG) == 2  # the case's reason, and its attempt's
    assert '<th scope="col">Why</th>' in page
    assert audit(page).problems == [] and " style=" not in page


def test_one_attempt_is_its_own_verdict_and_nothing_is_folded(ada: Any) -> None:
    case = made_for.search_case(ada)
    done = replay.evaluate([case], replay.target(), user=ada, case_set=case.case_set)
    [row] = tables.table(done).rows
    assert not row.folded and row.single is not None and row.single.passed
    page = make.logged_in(ada).get(reverse("chat:evals:run", args=[done.pk])).content.decode()
    assert "eval-attempts" not in page and "Passed</span>" in page
    assert 'aria-label="Inspect the attempt at “search the cards for pills”"' in page


def test_an_answer_without_a_tool_is_shown_as_the_final_answer(ada: Any) -> None:
    chat = make.conversation(ada, "Hi", enabled_tools=["search_cards"])
    make.run_turn(chat, "hello there")
    case = cases.save_case(chat, 0, set_name="greetings", user=ada)
    done = replay.evaluate([case], replay.target(), user=ada, case_set=case.case_set)
    assert EvalResult.objects.get().answer == ""  # stored only when it goes on to the answer

    [row] = tables.table(done).rows
    assert row.single is not None and row.single.answer.startswith("You said: “hello there”")
    page = make.logged_in(ada).get(reverse("chat:evals:run", args=[done.pk])).content.decode()
    assert "<summary>Final answer</summary>" in page and "You said: “hello there”" in page


def test_results_of_a_deleted_case_share_a_row(ada: Any) -> None:
    case = made_for.search_case(ada)
    done = replay.evaluate([case], replay.target(), user=ada, case_set=case.case_set, repeat=2)
    case.delete()
    [row] = tables.table(done).rows
    assert row.tally_text == "2/2 passed" and len(row.slots) == 2
