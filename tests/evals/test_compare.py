"""Comparisons (chat/evals/compare.py): the same case replayed on two strict local providers,
one deciding search_cards and the other get_current_time; the matrix marks the difference, on
the page and in the fragments its socket receives. And a conversation's last turn compared."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient
from django.urls import reverse

from chat.evals import cases, compare, lifecycle, replay
from chat.models import Case, CaseSet, Comparison, EvalResult, EvalRun, ProviderProfile
from chat.routing import websocket_urlpatterns
from chat.runs import RunRefused
from chat.testing import evals as made_for
from chat.testing import factories as make
from chat.testing.evals import settle
from chat.testing.openai_script import MODEL, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.evals.test_views import alerts, asearch_case, until_closed
from tests.test_security import audit

pytestmark = pytest.mark.django_db(transaction=True)
SEARCH = ("call_1", "search_cards", '{"query": "search the cards for pills"}')
TIME = ("call_2", "get_current_time", '{"timezone": "UTC"}')


@pytest.fixture
def other_openai() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def profile(name: str, server: FakeOpenAIServer) -> ProviderProfile:
    return ProviderProfile.objects.create(
        name=name, base_url=server.base_url, api_key_env="", model=MODEL, available_to_everyone=True
    )


def targets(*values: str, repeat: int = 1, **more: Any) -> dict[str, Any]:
    data: dict[str, Any] = {f"target_{n}": value for n, value in enumerate(values, start=1)}
    return data | {"repeat": repeat} | more


async def test_two_providers_deciding_differently_are_marked_on_every_differing_cell(
    fake_openai: FakeOpenAIServer, other_openai: FakeOpenAIServer
) -> None:
    ada = await sync(make.user)("ada")
    case = await asearch_case(ada)
    searching = await sync(profile)("Searcher", fake_openai)
    timing = await sync(profile)("Clock", other_openai)
    fake_openai.enqueue(tool_turn([SEARCH]))
    other_openai.enqueue(tool_turn([TIME]))
    client = AsyncClient()
    await client.aforce_login(ada)

    response = await client.post(
        reverse("chat:evals:compare"),
        targets(f"profile-{searching.pk}", f"profile-{timing.pk}", case_set=case.case_set_id),
    )

    comparison = await Comparison.objects.aget()
    assert response.status_code == 302
    assert response["Location"] == reverse("chat:evals:comparison", args=[comparison.pk])
    await settle()
    runs = [run async for run in comparison.eval_runs.order_by("pk")]
    assert [(run.label, run.status, run.passed, run.failed) for run in runs] == [
        (f"{MODEL} (Searcher)", "completed", 1, 0),
        (f"{MODEL} (Clock)", "completed", 0, 1),
    ]
    assert comparison.title == f"cards: {MODEL} (Searcher) vs {MODEL} (Clock)"
    assert fake_openai.pending == other_openai.pending == 0

    shown = await sync(compare.matrix)(comparison)
    (row,) = shown.rows
    assert row.differs and [cell.differs for cell in row.cells] == [True, True]
    assert row.expected_text == 'search_cards({"query": "search the cards for pills"})'
    assert [[r.verdict for r in cell.results] for cell in row.cells] == [["passed"], ["failed"]]
    assert shown.differing == 1 and not shown.is_active

    page = (await client.get(response["Location"])).content.decode()
    assert "ws-connect" not in page
    assert page.count("cell-differs") == 2
    assert re.search(r'<tr id="row-\d+-c\d+" class="compare-row differs">', page)
    assert "Differs</span>" in page  # a visible marker, not colour alone
    assert "1 of 1 case decided differently" in page
    assert "get_current_time({&quot;timezone&quot;: &quot;UTC&quot;})" in page
    assert page.count('class="verdict verdict-passed"') == 1
    assert page.count('class="verdict verdict-failed"') == 1
    assert audit(page).problems == [] and " style=" not in page


def test_the_same_decision_on_both_targets_does_not_differ() -> None:
    ada = make.user("ada")
    case = made_for.search_case(ada)
    chosen = [replay.target(), replay.target()]  # the scripted model, twice
    comparison, eval_runs = compare.create_comparison(
        [case], chosen, user=ada, case_set=case.case_set, repeat=2
    )
    asyncio.run(compare.run_comparison(eval_runs, chosen, [case], user=ada))

    shown = compare.matrix(comparison)
    (row,) = shown.rows
    assert not row.differs and [len(cell.results) for cell in row.cells] == [2, 2]
    assert [column.tally.rate for column in shown.columns] == ["100%", "100%"]
    page = make.logged_in(ada).get(reverse("chat:evals:comparison", args=[comparison.pk]))
    html = page.content.decode()
    assert "cell-differs" not in html and "0 of 1 case decided differently" in html
    # Each target's heading, and each cell's own (the card shows it on a phone).
    assert html.count("Target 1") == 2 and html.count("Target 2") == 2
    # Per target: the mean latency and tokens of its attempts, and each attempt's own.
    for column in shown.columns:
        assert column.latency is not None and column.tokens
        assert f"{column.latency:.2f} s · {column.tokens:.0f} tokens" in html
    for cell in row.cells:
        for result in cell.results:
            assert f"{result.latency:.2f} s · {result.tokens} tokens" in html


def test_a_target_that_answers_shows_its_final_answer() -> None:
    ada = make.user("ada")
    chat = make.conversation(ada, "Hi", enabled_tools=["search_cards"])
    make.run_turn(chat, "hello there")
    case = cases.save_case(chat, 0, set_name="greetings", user=ada)
    chosen = [replay.target(), replay.target()]
    comparison, eval_runs = compare.create_comparison(
        [case], chosen, user=ada, case_set=case.case_set
    )
    asyncio.run(compare.run_comparison(eval_runs, chosen, [case], user=ada))

    (row,) = compare.matrix(comparison).rows
    assert all(cell.results[0].answer.startswith("You said:") for cell in row.cells)
    html = make.logged_in(ada).get(reverse("chat:evals:comparison", args=[comparison.pk]))
    assert html.content.decode().count("<summary>Final answer<") == 2


def selected_set(page: str) -> str | None:
    found = re.search(r'<select name="case_set"[^>]*>(.*?)</select>', page, re.S)
    assert found is not None
    chosen = re.search(r'<option value="(\d*)" selected>', found.group(1))
    return chosen.group(1) if chosen else None


def test_compare_starts_with_the_only_set_or_the_one_last_replayed() -> None:
    ada, bob = make.user("ada"), make.user("bob")
    first = made_for.search_case(ada, set_name="first")
    url = reverse("chat:evals:compare")
    assert selected_set(make.logged_in(bob).get(url).content.decode()) == str(first.case_set_id)

    second = made_for.search_case(ada, set_name="second")
    replay.evaluate([second], replay.target(), user=ada, case_set=second.case_set)
    replay.evaluate([first], replay.target(), user=bob, case_set=first.case_set)
    assert selected_set(make.logged_in(ada).get(url).content.decode()) == str(second.case_set_id)
    assert selected_set(make.logged_in(bob).get(url).content.decode()) == str(first.case_set_id)
    carol = make.logged_in(make.user("carol")).get(url).content.decode()
    assert selected_set(carol) == ""  # "Choose a case set"
    chosen = make.logged_in(ada).get(f"{url}?set={first.case_set_id}").content.decode()
    assert selected_set(chosen) == str(first.case_set_id)


def test_a_comparison_takes_two_or_three_targets() -> None:
    ada = make.user("ada")
    case = made_for.search_case(ada)
    for count in (1, 4):
        with pytest.raises(RunRefused, match="Compare 2 to 3 targets"):
            compare.create_comparison(
                [case], [replay.target()] * count, user=ada, case_set=case.case_set
            )
    assert not Comparison.objects.exists() and not EvalRun.objects.exists()


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (targets("default", ""), "Choose a target."),
        (targets("default", "default", repeat=6), "Repeat takes 1 to 5 attempts per case."),
        (targets("default", "nowhere"), "Choose a target from the list."),
    ],
)
def test_bad_compare_input_is_one_line_and_keeps_what_was_typed(
    data: dict[str, Any], line: str
) -> None:
    ada = make.user("ada")
    case = made_for.search_case(ada)
    typed = data | {"case_set": case.case_set_id, "model_1": "kept-model"}

    response = make.logged_in(ada).post(reverse("chat:evals:compare"), typed)

    assert response.status_code == 422
    page = response.content.decode()
    assert alerts(page) == [line]
    assert 'value="kept-model"' in page
    assert not Comparison.objects.exists()


def test_compare_wants_a_case_set_unless_it_compares_a_conversation() -> None:
    ada = make.user("ada")
    made_for.search_case(ada)
    response = make.logged_in(ada).post(
        reverse("chat:evals:compare"), targets("default", "default")
    )
    assert response.status_code == 422
    assert alerts(response.content.decode()) == ["Choose a case set."]


def test_a_profile_the_user_may_not_use_cannot_be_compared(fake_openai: FakeOpenAIServer) -> None:
    ada = make.user("ada")
    case = made_for.search_case(ada)
    private = ProviderProfile.objects.create(
        name="Private", base_url=fake_openai.base_url, api_key_env="", model=MODEL
    )
    response = make.logged_in(ada).post(
        reverse("chat:evals:compare"),
        targets("default", f"profile-{private.pk}", case_set=case.case_set_id),
    )
    assert response.status_code == 422
    assert alerts(response.content.decode()) == [
        "You may not use this provider profile: choose another target."
    ]
    assert fake_openai.requests == []


async def test_a_conversations_last_turn_becomes_a_case_of_its_own_set() -> None:
    ada = await sync(make.user)("ada")
    bob = await sync(make.user)("bob")
    case = await asearch_case(ada)
    conversation = await sync(lambda: case.conversation)()
    url = f"{reverse('chat:evals:compare')}?conversation={conversation.pk}"
    client = AsyncClient()
    await client.aforce_login(ada)

    page = (await client.get(url)).content.decode()
    assert f'<input type="hidden" name="conversation" value="{conversation.pk}">' in page
    assert "the last turn of" in page and 'name="case_set"' not in page
    data = targets("default", "default", conversation=conversation.pk)
    for _ in range(2):
        response = await client.post(reverse("chat:evals:compare"), data)
        assert response.status_code == 302
        await settle()

    kept = await CaseSet.objects.aget(name="Last turn of “Pills”")
    (made,) = [c async for c in Case.objects.filter(case_set=kept)]
    assert (made.conversation_id, made.at_message, made.expected) == (
        conversation.pk,
        0,
        case.expected,
    )
    # Compared twice: the same case, in two comparisons of two targets each.
    assert await Comparison.objects.acount() == 2
    assert await EvalResult.objects.filter(case=made, verdict="passed").acount() == 4

    # Another user may not take a conversation they cannot read, unless it is shared.
    teammate = AsyncClient()
    await teammate.aforce_login(bob)
    assert (await teammate.get(url)).status_code == 404
    assert (await teammate.post(reverse("chat:evals:compare"), data)).status_code == 404
    conversation.shared = True
    await conversation.asave(update_fields=["shared"])
    assert (await teammate.get(url)).status_code == 200


def test_a_conversation_without_a_reply_has_no_last_turn_to_compare() -> None:
    ada = make.user("ada")
    empty = make.new_conversation(ada, "Nothing yet")
    response = make.logged_in(ada).post(
        reverse("chat:evals:compare"), targets("default", "default", conversation=empty.pk)
    )
    assert response.status_code == 422
    assert alerts(response.content.decode()) == ["This conversation has no reply to compare yet."]
    assert not CaseSet.objects.exists()


def test_a_long_title_still_fits_a_set_name() -> None:
    ada = make.user("ada")
    long = make.new_conversation(ada, "A title " * 30)
    assert len(compare.last_turn_set_name(long, 12)) <= 100
    assert compare.last_turn_set_name(long, 12).endswith("…” (12)")


async def test_the_comparison_socket_gets_the_row_as_each_target_decides(
    fake_openai: FakeOpenAIServer, other_openai: FakeOpenAIServer
) -> None:
    ada = await sync(make.user)("ada")
    case = await asearch_case(ada)
    chosen = [
        replay.target(profile=await sync(profile)("Searcher", fake_openai)),
        replay.target(profile=await sync(profile)("Clock", other_openai)),
    ]
    fake_openai.enqueue(tool_turn([SEARCH]))
    other_openai.enqueue(tool_turn([TIME]).but(delay=0.3))  # decides second
    comparison, eval_runs = await sync(compare.create_comparison)(
        [case], chosen, user=ada, case_set=await sync(lambda: case.case_set)()
    )
    router = URLRouter(websocket_urlpatterns)  # type: ignore[arg-type]
    ws = WebsocketCommunicator(router, f"/ws/evals/compare/{comparison.pk}/")
    ws.scope["user"] = ada  # type: ignore[typeddict-unknown-key]
    assert (await ws.connect())[0]
    body, head, page = [await ws.receive_from(timeout=5) for _ in range(3)]  # the catch-up
    assert body.count("Waiting…") == 2 and "Target 2" in head and "0 / 2" in page

    await lifecycle.start_comparison(comparison, eval_runs, chosen, [case], user=ada)

    frames = await until_closed(ws)
    rows = [f for f in frames if f.lstrip().startswith(f'<tr id="row-{comparison.pk}-c{case.pk}"')]
    first = rows[0]
    assert 'hx-swap-oob="true"' in first and "verdict-passed" in first
    assert "Waiting…" in first and "differs" not in first  # the other target still deciding
    decided = next(f for f in rows if "verdict-failed" in f)
    assert "cell-differs" in decided and "Differs</span>" in decided
    assert "The comparison is finished: 1 case(s) decided differently." in frames[-1]
