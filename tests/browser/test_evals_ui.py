"""Evaluations in the browser, as an evaluator uses them: start an evaluation from the
Evaluations page and watch its rows fill in live (a slow strict provider answers one attempt
after another); compare the scripted model with a provider that decides otherwise and see the
difference marked. Screenshots at 1440x900 and 390x844, light and dark, with axe."""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connections
from playwright.sync_api import Page, expect

from chat import agent
from chat.evals import replay
from chat.models import Case, CaseSet, EvalResult, EvalRun, ProviderProfile
from chat.testing.openai_script import MODEL, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.browser.test_screens import look

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

QUESTION = "search the cards for pills"
SEARCH = ("call_1", "search_cards", f'{{"query": "{QUESTION}"}}')
TIME = ("call_2", "get_current_time", '{"timezone": "UTC"}')


def cases_of(name: str, owner: Any) -> CaseSet:
    """A set of two cases on the same question: one expects the search the models make, the
    other the time (so it fails), as a team writes down what it expects."""
    case_set = CaseSet.objects.create(name=name, created_by=owner)
    tools = [
        definition.to_openai()
        for definition in agent.default_registry.definitions(["search_cards", "get_current_time"])
    ]
    for title, expected in [
        ("Pills: search the cards", {"name": "search_cards", "arguments": {"query": QUESTION}}),
        ("Pills: the time first (a stricter reading)", {"name": "get_current_time"}),
    ]:
        Case.objects.create(
            case_set=case_set,
            title=title,
            messages=[{"role": "user", "content": QUESTION}],
            tools=tools,
            expected={"tool_calls": [{"arguments": {}} | expected]},
            source="given",
            created_by=owner,
        )
    return case_set


def in_a_thread[T](work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`work` done in a thread of its own: Playwright's loop runs in this one."""

    def done() -> T:
        try:
            return work(*args, **kwargs)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(done).result()


def narrow(page: Page) -> bool:
    size = page.viewport_size
    return size is not None and size["width"] < 500


def no_sideways(page: Page) -> None:
    """Nothing on the page, nor in a table's box, scrolls sideways."""
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.evaluate(
        "[...document.querySelectorAll('.table-scroll')].every(b => b.scrollWidth <= b.clientWidth)"
    )


CARD_BOXES = """card => [...document.querySelectorAll(card)].map(found => {
  const box = element => {
    const rect = element?.getBoundingClientRect();
    return rect && rect.height > 0 ? {y: rect.y, width: rect.width} : null;
  };
  return {
    card: box(found),
    verdict: box(found.querySelector(".verdict")),
    title: box(found.querySelector("th[scope=row]")),
  };
})"""


def cards_fit(page: Page, card: str, *, verdict_first: bool = True) -> None:
    """On a phone: nothing scrolls sideways, a card fits the screen's width and (a case of an
    evaluation) opens with its verdict. The boxes are read in one script, so a live frame that
    swaps a card in again between two reads cannot leave one of them unmeasured."""
    if not narrow(page):
        return
    no_sideways(page)
    width = page.evaluate("window.innerWidth")
    found = page.evaluate(CARD_BOXES, card)
    assert found
    for boxes in found:
        assert None not in boxes.values(), boxes
        if verdict_first:
            assert boxes["verdict"]["y"] < boxes["title"]["y"], boxes
        assert boxes["card"]["width"] <= width, boxes


def provider(name: str, server: FakeOpenAIServer) -> ProviderProfile:
    return ProviderProfile.objects.create(
        name=name, base_url=server.base_url, api_key_env="", model=MODEL, available_to_everyone=True
    )


PROGRESS_SEEN = """() => {
  const read = () => document.querySelector("#eval-progress .eval-done")?.textContent.trim();
  window.progressSeen = [read()];
  new MutationObserver(() => {
    const now = read();
    if (now !== window.progressSeen.at(-1)) window.progressSeen.push(now);
  }).observe(document.body, {childList: true, subtree: true, characterData: true});
}"""


def test_start_an_evaluation_and_watch_its_rows_fill_in_live(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer
) -> None:
    owner = login()
    cases_of("pills", owner)
    provider("Slow provider", fake_openai)
    # Four attempts in flight at once, answered one after another.
    fake_openai.enqueue(*(tool_turn([SEARCH]).but(delay=1.0 + n) for n in range(4)))

    page.goto(f"{live_server_url}/")
    page.get_by_role("link", name="Evaluations", exact=True).click()
    expect(page.get_by_role("heading", name="Evaluations", level=1)).to_be_visible()
    page.get_by_label("Case set", exact=True).select_option(label="pills")
    page.get_by_label("Target", exact=True).select_option(label=f"Slow provider · {MODEL}")
    expect(page.get_by_label("Model (optional)")).to_have_attribute("placeholder", MODEL)
    page.get_by_label(re.compile(r"^Repeat")).fill("2")
    page.get_by_role("button", name="Run", exact=True).click()

    expect(page).to_have_url(re.compile(r"/evals/runs/\d+/$"))
    page.evaluate(PROGRESS_SEEN)
    page.evaluate("window.stayed = true")  # gone if the page reloaded
    rows = page.locator("#results .eval-group")
    expect(rows).to_have_count(2)  # a row per case, its two attempts folded under it
    progress = page.locator("#eval-progress .eval-done")
    expect(page.locator(".eval-page[data-socket='open']")).to_have_count(1)
    expect(progress).to_have_text("1 / 4", timeout=5_000)
    expect(page.locator(".verdict-waiting")).to_have_count(4)  # a case's row and 3 attempts
    expect(page.locator(".eval-row", has_text="1/2 passed")).to_have_count(1)
    expect(progress).to_have_text("4 / 4", timeout=8_000)
    # Each answer moved the count on its own, however slowly this test looked.
    assert page.evaluate("window.progressSeen")[-4:] == ["1 / 4", "2 / 4", "3 / 4", "4 / 4"]
    expect(page.locator("#eval-progress .eval-status")).to_have_text("Completed")
    expect(page.locator("#eval-announce")).to_have_text(
        "The evaluation is finished: 2 passed, 2 failed."
    )
    expect(page.locator("#eval-stop")).to_have_count(0)
    assert page.evaluate("window.stayed") is True
    assert fake_openai.pending == 0
    eval_run = EvalRun.objects.get()
    assert (eval_run.passed, eval_run.failed, eval_run.label) == (2, 2, f"{MODEL} (Slow provider)")
    expect(page.locator(".eval-row .verdict")).to_have_text(["2/2 passed", "0/2 passed"])
    expect(page.locator(".eval-attempt .verdict-passed")).to_have_count(2)
    expect(page.locator(".eval-attempt .verdict-failed")).to_have_count(2)
    page.get_by_text("2 attempts").first.click()  # folded under the case until opened
    inspect = page.get_by_role("link", name=re.compile(r"^Inspect attempt 1 of “Pills: search"))
    expect(inspect).to_have_attribute("href", re.compile(r"^/c/\d+/runs/\d+/$"))

    def finished(shown: Page) -> None:
        expect(shown.locator("#results .eval-group")).to_have_count(2)
        failing = shown.locator(".eval-group").nth(1)
        expect(failing.locator(".eval-reason")).to_have_text(
            "expected get_current_time, got search_cards"
        )
        failing.get_by_text("2 attempts").click()
        expect(failing.locator(".eval-attempt").first).to_be_visible()
        expect(failing.locator(".eval-attempt-facts").first).to_contain_text("tokens")
        shown.get_by_text("How a case passes").click()
        expect(shown.get_by_text("A case passes when the model")).to_be_visible()
        cards_fit(shown, ".eval-group")

    look(page, "evals-run", finished)

    page.goto(f"{live_server_url}/evals/")

    def index(shown: Page) -> None:
        expect(shown.get_by_role("link", name="pills", exact=True).first).to_be_visible()
        expect(shown.get_by_role("link", name="Evaluations", exact=True)).to_have_attribute(
            "aria-current", "page"
        )
        if narrow(shown):
            no_sideways(shown)

    look(page, "evals-index", index)

    def refused(shown: Page) -> None:
        shown.get_by_label(re.compile(r"^Repeat")).fill("50")
        shown.get_by_label("Model (optional)").fill("kept-model")
        shown.get_by_role("button", name="Run", exact=True).click()
        expect(shown.get_by_role("alert")).to_have_text("Repeat takes 1 to 20 attempts per case.")
        expect(shown.get_by_label("Model (optional)")).to_have_value("kept-model")

    look(page, "evals-refused", refused)
    assert EvalRun.objects.count() == 1

    page.goto(f"{live_server_url}/evals/sets/{eval_run.case_set_id}/")

    def set_page(shown: Page) -> None:
        expect(shown.get_by_role("heading", name=re.compile("^pills"))).to_be_visible()
        expect(shown.locator(".cases-table tbody tr")).to_have_count(2)
        if narrow(shown):
            no_sideways(shown)

    look(page, "evals-set", set_page)


def test_an_evaluation_in_progress_as_a_teammate_opens_it(
    page: Page, live_server_url: str, login: Any
) -> None:
    """Half done, the rest waiting: what a page opened mid-way shows (its Stop only for whoever
    started it: this teammate sees none)."""
    ada = login("ada")
    case_set = cases_of("pills", ada)
    found = list(case_set.cases.order_by("pk"))
    chosen = replay.target()
    eval_run = replay.create_eval_run(found, chosen, user=None, case_set=case_set, repeat=2)
    EvalResult.objects.create(
        eval_run=eval_run,
        case=found[0],
        case_title=found[0].title,
        attempt=1,
        verdict="passed",
        expected=found[0].expected,
        got=found[0].expected,
        latency=0.42,
        prompt_tokens=120,
        completion_tokens=18,
    )
    EvalRun.objects.filter(pk=eval_run.pk).update(passed=1)
    page.goto(f"{live_server_url}/evals/runs/{eval_run.pk}/")

    def waiting(shown: Page) -> None:
        expect(shown.locator(".eval-page[data-socket='open']")).to_have_count(1)
        expect(shown.locator("#eval-progress .eval-done")).to_have_text("1 / 4")
        expect(shown.locator(".verdict-waiting")).to_have_count(4)  # a row and 3 attempts
        expect(shown.locator(".eval-row").first).to_contain_text("1/2 passed")
        expect(shown.locator(".eval-row").first).to_contain_text("1 to come")
        cards_fit(shown, ".eval-group")

    look(page, "evals-run-live", waiting)
    EvalRun.objects.filter(pk=eval_run.pk).update(status="cancelled")


def test_compare_the_scripted_model_with_a_provider_that_decides_otherwise(
    page: Page, live_server_url: str, login: Any, fake_openai: FakeOpenAIServer
) -> None:
    owner = login()
    case_set = cases_of("pills", owner)
    Case.objects.filter(case_set=case_set, title__contains="time").delete()
    provider("Clock", fake_openai)
    fake_openai.enqueue(tool_turn([TIME]).but(delay=0.5))

    page.goto(f"{live_server_url}/evals/compare/")

    def form(shown: Page) -> None:
        expect(shown.get_by_role("group", name="Targets")).to_be_visible()
        expect(shown.get_by_label("Target 3", exact=True)).to_have_value("")
        # The only case set is chosen already.
        expect(shown.get_by_label("Case set", exact=True)).to_have_value(str(case_set.pk))

    look(page, "evals-compare", form)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.get_by_label("Case set", exact=True).select_option(label="pills")
    page.get_by_label("Target 1", exact=True).select_option(value="default")
    page.get_by_label("Target 2", exact=True).select_option(label=f"Clock · {MODEL}")
    page.get_by_role("button", name="Compare", exact=True).click()

    expect(page).to_have_url(re.compile(r"/evals/compare/\d+/$"))
    row = page.locator(".matrix tbody tr").first
    expect(row.locator(".differs-badge")).to_have_text("Differs", timeout=8_000)
    expect(row.locator(".cell-differs")).to_have_count(2)
    expect(row.locator(".verdict-passed")).to_have_count(1)
    expect(row.locator(".verdict-failed")).to_have_count(1)
    expect(page.locator("#compare-progress")).to_contain_text("1 of 1 case decided differently")
    expect(page.locator("#compare-announce")).to_have_text(
        "The comparison is finished: 1 case(s) decided differently."
    )
    assert fake_openai.pending == 0

    def matrix(shown: Page) -> None:
        expect(shown.locator(".matrix .differs-badge")).to_be_visible()
        expect(shown.get_by_text('get_current_time({"timezone": "UTC"})')).to_be_visible()
        # Per target, the time and tokens of each attempt and of the target on average.
        expect(shown.locator(".compare-cell .attempt-measures")).to_have_count(2)
        expect(shown.locator(".compare-cell .attempt-measures").first).to_have_text(
            re.compile(r"^\d+\.\d\d s · \d+ tokens$")
        )
        expect(shown.locator(".compare-target-means")).to_have_count(2)
        cards_fit(shown, ".compare-row", verdict_first=False)
        if narrow(shown):
            chip = shown.locator(".compare-expected-inline").first.bounding_box()
            cell = shown.locator(".compare-cell").first.bounding_box()
            assert chip is not None and cell is not None
            assert chip["y"] + chip["height"] <= cell["y"], (chip, cell)  # above, not over it

    look(page, "evals-comparison", matrix)


def test_inspect_an_attempt_opens_its_run_read_only_and_leads_back(
    page: Page, live_server_url: str, login: Any
) -> None:
    """From an evaluation's row to the run its attempt made: the waterfall and the requests,
    nothing to write, and the way back to the evaluation."""
    owner = login()
    case_set = cases_of("pills", owner)
    found = list(case_set.cases.order_by("pk"))
    done = in_a_thread(replay.evaluate, found, replay.target(), user=owner, case_set=case_set)
    page.goto(f"{live_server_url}/evals/runs/{done.pk}/")

    page.get_by_role("link", name=re.compile(r"^Inspect the attempt at “Pills: search")).click()

    expect(page).to_have_url(re.compile(r"/c/\d+/runs/\d+/$"))
    back = page.get_by_role("link", name=f"Back to evaluation #{done.pk}")

    def inspected(shown: Page) -> None:
        expect(shown.get_by_role("heading", level=1)).to_contain_text("Pills: search the cards")
        expect(shown.locator(".verdict-passed")).to_have_text("Passed")
        expect(shown.locator(".waterfall-frame svg.waterfall:visible")).to_have_count(1)
        expect(shown.get_by_role("heading", name=re.compile(r"^Step 1 of"))).to_be_visible()
        expect(shown.get_by_role("button", name="Copy JSON").first).to_be_visible()
        expect(shown.locator("#composer, [ws-send], [ws-connect]")).to_have_count(0)
        expect(shown.get_by_role("link", name="Agent settings")).to_have_count(0)
        expect(shown.get_by_role("button", name="Regenerate reply")).to_have_count(0)
        expect(back).to_be_visible()

    look(page, "evals-inspect", inspected)

    back.click()
    expect(page).to_have_url(f"{live_server_url}/evals/runs/{done.pk}/")
    expect(page.locator("#results .eval-group")).to_have_count(2)
