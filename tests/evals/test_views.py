"""The Evaluations pages (chat/evals/views.py) and their live progress (chat/evals/fragments.py):
who sees what, the Run form's refusals, an evaluation started from the page and run to its end
with the scripted model, Stop, and the fragments its socket receives."""

from __future__ import annotations

import asyncio
import html as htmllib
import re
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient, Client, override_settings
from django.urls import reverse

from chat import consumers
from chat.evals import cases, forms, lifecycle, replay
from chat.models import Case, EvalResult, EvalRun, ProviderProfile
from chat.routing import websocket_urlpatterns
from chat.runs import tasks
from chat.testing import evals as made_for
from chat.testing import factories as make
from chat.testing.evals import settle
from tests.test_security import audit

pytestmark = pytest.mark.django_db(transaction=True)
SEARCH = 'search_cards({"query": "search the cards for pills"})'


async def alogged_in(user: Any) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


async def asearch_case(owner: Any) -> Case:
    """`made_for.search_case`, from an async test."""
    conversation = await sync(make.conversation)(
        owner, "Pills", enabled_tools=["search_cards", "get_current_time"]
    )
    await (await make.start_as_owner(conversation, made_for.QUESTION)).task
    return await sync(cases.save_case)(conversation, 0, set_name="cards", user=owner)


def alerts(page: str) -> list[str]:
    return [
        htmllib.unescape(re.sub(r"<[^>]+>", "", text)).strip()
        for text in re.findall(r'role="alert">(.*?)</p>', page, re.S)
    ]


def form_data(case: Case, **overrides: Any) -> dict[str, Any]:
    return {"case_set": case.case_set_id, "target": "default", "model": "", "repeat": 1} | overrides


@pytest.fixture
def ada() -> Any:
    return make.user("ada")


@pytest.fixture
def case(ada: Any) -> Case:
    return made_for.search_case(ada)


def test_every_page_requires_login(case: Case, ada: Any) -> None:
    done = replay.evaluate([case], replay.target(), user=ada, case_set=case.case_set)
    anonymous = Client()
    pages = [
        reverse("chat:evals:index"),
        reverse("chat:evals:set", args=[case.case_set_id]),
        reverse("chat:evals:run", args=[done.pk]),
        reverse("chat:evals:compare"),
    ]
    for url in pages:
        response = anonymous.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"], url
    for url in [
        reverse("chat:evals:index"),
        reverse("chat:evals:compare"),
        reverse("chat:evals:run_stop", args=[done.pk]),
    ]:
        assert anonymous.post(url, form_data(case)).status_code == 302
    assert EvalRun.objects.count() == 1


def test_the_evaluations_page_shows_the_teams_sets_and_evaluations(case: Case, ada: Any) -> None:
    done = replay.evaluate([case], replay.target(), user=ada, case_set=case.case_set, repeat=2)
    bob = make.logged_in(make.user("bob"))  # the team's: a teammate sees everything

    response = bob.get(reverse("chat:evals:index"))

    page = response.content.decode()
    assert response.status_code == 200
    assert re.search(
        r'<a class="topbar-link" href="/evals/" aria-current="page">.*?Evaluations</span></a>', page
    )
    set_url = reverse("chat:evals:set", args=[case.case_set_id])
    assert f'<a href="{set_url}">cards</a>' in page
    assert (
        '<td class="num" data-label="Cases">1</td>' in page and "100%" in page
    )  # one case, last run's rate
    assert f'href="{reverse("chat:evals:run", args=[done.pk])}"' in page
    assert "2 / 2" in page and "2 passed" in page and "Scripted model (offline)" in page
    assert 'aria-label="2 passed, 0 failed"' in page  # the bar, for a screen reader
    assert (
        '<option value="default" selected>Server default · Scripted model (offline)</option>'
        in (page)
    )
    assert "Continue to the final answer (tools answered from recorded results)" in page
    assert audit(page).problems == [] and " style=" not in page


def test_a_set_page_links_a_source_conversation_only_for_who_may_read_it(
    case: Case, ada: Any
) -> None:
    url = reverse("chat:evals:set", args=[case.case_set_id])
    source = reverse("chat:conversation_detail", args=[case.conversation_id])

    mine = make.logged_in(ada).get(url).content.decode()
    theirs = make.logged_in(make.user("bob")).get(url).content.decode()

    for page in (mine, theirs):
        assert case.title in page and f'<code class="decision">{SEARCH}</code>' in htmllib.unescape(
            page
        )
        assert re.search(r'<td class="num" data-label="Fixtures">\d+</td>', page)
    assert f'href="{source}"' in mine
    assert f'href="{source}"' not in theirs and "A conversation not shared with you" in theirs


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        ({"repeat": 0}, "Repeat takes 1 to 20 attempts per case."),
        ({"repeat": 21}, "Repeat takes 1 to 20 attempts per case."),
        ({"repeat": "many"}, "Repeat takes 1 to 20 attempts per case."),
        ({"case_set": ""}, "Choose a case set."),
        ({"case_set": 9999}, "That case set does not exist any more: choose another."),
        ({"target": "https://evil.example/v1"}, "Choose a target from the list."),
        ({"target": "profile-9999"}, "Choose a target from the list."),
        ({"model": "m" * 201}, "A model name has at most 200 characters."),
    ],
)
def test_bad_input_is_one_clear_line_and_the_form_keeps_what_was_typed(
    case: Case, ada: Any, overrides: dict[str, Any], line: str
) -> None:
    typed = form_data(case, model="my-model", repeat=3, continue_loop="on") | overrides

    response = make.logged_in(ada).post(reverse("chat:evals:index"), typed)

    page = response.content.decode()
    assert response.status_code == 422
    assert alerts(page) == [line]
    if "model" not in overrides:
        assert 'value="my-model"' in page
    if "repeat" not in overrides:
        assert 'value="3"' in page
    assert re.search(r'<input type="checkbox" name="continue_loop"[^>]* checked', page)
    assert not EvalRun.objects.exists()


def test_a_set_without_cases_and_a_default_endpoint_without_a_model_are_refused(
    case: Case, ada: Any, settings: Any
) -> None:
    empty = Case.objects.get().case_set
    empty.cases.all().delete()
    client = make.logged_in(ada)
    refused = client.post(reverse("chat:evals:index"), form_data(case))
    assert alerts(refused.content.decode()) == ["The set “cards” has no cases to replay."]

    made_for.search_case(ada)
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"  # a server endpoint without a model
    refused = client.post(reverse("chat:evals:index"), form_data(case))
    assert refused.status_code == 422
    assert alerts(refused.content.decode()) == [
        "Set AGENTLAB_MODEL (or pass a model) to use an OpenAI-compatible server."
    ]
    assert not EvalRun.objects.exists()


def test_only_the_profiles_a_user_may_use_are_offered_and_accepted(case: Case, ada: Any) -> None:
    private = ProviderProfile.objects.create(
        name="Private", base_url="http://127.0.0.1:9/v1", model="big-model"
    )
    shared = ProviderProfile.objects.create(
        name="Shared", base_url="http://127.0.0.1:9/v1", model="small", available_to_everyone=True
    )
    client = make.logged_in(ada)

    page = client.get(reverse("chat:evals:index")).content.decode()
    assert f'value="profile-{shared.pk}">Shared · small</option>' in page
    assert "Private" not in page and "big-model" not in page
    refused = client.post(
        reverse("chat:evals:index"), form_data(case, target=f"profile-{private.pk}")
    )
    assert refused.status_code == 422
    assert alerts(refused.content.decode()) == [forms.NOT_USABLE]
    assert not EvalRun.objects.exists()

    root = make.logged_in(make.user("root", is_staff=True, is_superuser=True))
    assert f"profile-{private.pk}" in root.get(reverse("chat:evals:index")).content.decode()


async def test_starting_an_evaluation_replays_it_to_the_end_and_keeps_the_results() -> None:
    ada = await sync(make.user)("ada")
    case = await asearch_case(ada)
    client = await alogged_in(ada)

    response = await client.post(
        reverse("chat:evals:index"), form_data(case, repeat=2, model="scripted")
    )

    eval_run = await EvalRun.objects.aget()
    assert response.status_code == 302
    assert response["Location"] == reverse("chat:evals:run", args=[eval_run.pk])
    await settle()
    await eval_run.arefresh_from_db()
    assert (eval_run.status, eval_run.total, eval_run.passed, eval_run.failed) == (
        "completed",
        2,
        2,
        0,
    )
    assert eval_run.started_by_id == ada.pk and eval_run.case_set_id == case.case_set_id
    results = [r async for r in EvalResult.objects.filter(eval_run=eval_run).order_by("attempt")]
    assert [(r.attempt, r.verdict) for r in results] == [(1, "passed"), (2, "passed")]

    page = (await client.get(response["Location"])).content.decode()
    assert "ws-connect" not in page  # nothing more to come
    assert page.count('<span class="verdict verdict-passed">') == 3  # the case, its attempts
    assert "2/2 passed" in page
    assert "Completed" in page and "2 / 2" in page
    run = await sync(lambda: results[0].run)()
    inspect = reverse("chat:run_detail", args=[run.conversation_id, run.pk])
    assert f'href="{inspect}"' in page
    assert "A case passes when the model" in page  # the rule, folded
    # A teammate opens the attempt's replay (shared with the team).
    bob = await alogged_in(await sync(make.user)("bob"))
    assert (await bob.get(inspect)).status_code == 200


async def test_continue_keeps_the_final_answer_folded_in_its_row() -> None:
    ada = await sync(make.user)("ada")
    case = await asearch_case(ada)
    client = await alogged_in(ada)

    response = await client.post(reverse("chat:evals:index"), form_data(case, continue_loop="on"))
    await settle()

    result = await EvalResult.objects.aget()
    assert result.verdict == "passed" and result.answer
    page = (await client.get(response["Location"])).content.decode()
    assert '<details class="eval-answer"><summary>Final answer</summary>' in page
    assert "The final answer (tools answered from recorded results)" in page


def test_an_evaluation_in_progress_shows_every_attempt_waiting_and_its_socket(
    case: Case, ada: Any
) -> None:
    eval_run = replay.create_eval_run(
        [case], replay.target(), user=ada, case_set=case.case_set, repeat=3
    )
    url = reverse("chat:evals:run", args=[eval_run.pk])

    page = make.logged_in(ada).get(url).content.decode()
    assert f'ws-connect="/ws/evals/runs/{eval_run.pk}/"' in page
    assert page.count("Waiting…") == 4  # the case's row, and each attempt folded under it
    assert page.count(f'id="slot-{eval_run.pk}-c{case.pk}-') == 3
    assert page.count(f'<tbody id="case-{eval_run.pk}-c{case.pk}"') == 1
    assert "<summary>3 attempts<" in page
    assert "0 / 3" in page and 'id="eval-stop"' in page

    teammate = make.logged_in(make.user("bob"))
    shown = teammate.get(url).content.decode()
    assert "0 / 3" in shown and 'id="eval-stop"' not in shown
    assert teammate.post(reverse("chat:evals:run_stop", args=[eval_run.pk])).status_code == 403


async def test_stop_ends_an_evaluation_and_keeps_what_was_done() -> None:
    ada = await sync(make.user)("ada")
    case = await asearch_case(ada)
    client = await alogged_in(ada)
    with override_settings(AGENTLAB_SCRIPTED_DELAY=0.3):
        await client.post(reverse("chat:evals:index"), form_data(case, repeat=8))
        eval_run = await EvalRun.objects.aget()
        response = await client.post(reverse("chat:evals:run_stop", args=[eval_run.pk]))
        assert response.status_code == 302
        await settle()
    await eval_run.arefresh_from_db()
    assert eval_run.status == "cancelled" and eval_run.done < 8
    page = (await client.get(reverse("chat:evals:run", args=[eval_run.pk]))).content.decode()
    assert "Cancelled" in page and "Not run" in page and 'id="eval-stop"' not in page


def test_what_cases_and_models_say_is_escaped(ada: Any) -> None:
    case = made_for.search_case(ada, set_name="<b>set</b>", title="<script>alert(1)</script>")
    done = replay.evaluate([case], replay.target(), user=ada, case_set=case.case_set)
    client = make.logged_in(ada)
    for url in [
        reverse("chat:evals:index"),
        reverse("chat:evals:set", args=[case.case_set_id]),
        reverse("chat:evals:run", args=[done.pk]),
    ]:
        page = client.get(url).content.decode()
        assert "<script>alert" not in page and "<b>set</b>" not in page
        assert audit(page).problems == [] and " style=" not in page


# The socket of an evaluation's page.


async def connect(user: Any, path: str) -> WebsocketCommunicator:
    router = URLRouter(websocket_urlpatterns)  # type: ignore[arg-type]
    communicator = WebsocketCommunicator(router, path)
    communicator.scope["user"] = user  # type: ignore[typeddict-unknown-key]
    return communicator


async def test_each_result_reaches_the_page_as_its_row_and_the_end_closes_the_socket() -> None:
    ada = await sync(make.user)("ada")
    case = await asearch_case(ada)
    chosen = replay.target()
    eval_run = await sync(replay.create_eval_run)(
        [case], chosen, user=ada, case_set=case.case_set, repeat=2
    )
    bob = await sync(make.user)("bob")  # any teammate may watch
    ws = await connect(bob, f"/ws/evals/runs/{eval_run.pk}/")
    assert (await ws.connect())[0]
    rows, page = [await ws.receive_from(timeout=5) for _ in range(2)]  # the catch-up
    assert rows.lstrip().startswith('<table class="eval-table results-table" id="results"')
    assert rows.count("Waiting…") == 3  # the case's row and its two attempts
    assert page.lstrip().startswith('<div id="eval-progress"') and "0 / 2" in page

    await lifecycle.watched(eval_run, [case], chosen, user=ada)

    frames = await until_closed(ws)
    group = f'<tbody id="case-{eval_run.pk}-c{case.pk}" class="eval-group verdict-row-'
    pushed = [f for f in frames if f.lstrip().startswith(group)]
    assert len(pushed) == 2  # the case's row, once per attempt
    assert re.search(r'class="[^"]*" hx-swap-oob="true"', pushed[0].lstrip().split("\n")[0])
    after = frames[frames.index(pushed[0]) + 1]  # the progress, as the database has it then
    # Replayed at once, the second may be in the database when the first is drawn.
    assert re.search(r"[12]/2 passed", pushed[0]) and re.search(r"[12] / 2", after)
    assert "2/2 passed" in pushed[1] and "to come" not in pushed[1]
    body, final = frames[-2:]  # at the end, every row, then the end
    assert body.lstrip().startswith(
        '<table class="eval-table results-table" id="results" hx-swap-oob="true">'
    )
    assert "Completed" in final and "2 / 2" in final
    assert '<div id="eval-actions" class="eval-actions" hx-swap-oob="true">' in final
    assert "The evaluation is finished: 2 passed, 0 failed." in final


async def until_closed(ws: WebsocketCommunicator) -> list[str]:
    """Every frame until the server closes the socket; none mixes table parts with others
    (htmx would drop a `<tr>` that follows a `<div>` in one frame)."""
    frames = []
    while True:
        message = await ws.receive_output(timeout=5)
        if message["type"] == "websocket.close":
            return frames
        frame = message["text"]
        tags = set(re.findall(r"^\s*<(\w+)|\n<(\w+) id=", frame))
        kinds = {tag for pair in tags for tag in pair if tag}
        table = {"table", "tr", "tbody", "thead"}
        assert kinds <= table or not kinds & table, frame
        frames.append(frame)


async def test_the_socket_wants_a_user_and_an_evaluation_and_closes_when_it_is_over() -> None:
    from django.contrib.auth.models import AnonymousUser

    ada = await sync(make.user)("ada")
    case = await asearch_case(ada)
    chosen = replay.target()
    done = await sync(replay.create_eval_run)([case], chosen, user=ada, case_set=case.case_set)
    await replay.run_eval(done, [case], chosen, user=ada)

    anonymous = await connect(AnonymousUser(), f"/ws/evals/runs/{done.pk}/")
    assert await anonymous.connect() == (False, consumers.CLOSE_UNAUTHENTICATED)
    for path in [f"/ws/evals/runs/{done.pk + 1}/", f"/ws/evals/other/{done.pk}/"]:
        assert await (await connect(ada, path)).connect() == (False, consumers.CLOSE_NOT_FOUND)
    ended = await connect(ada, f"/ws/evals/runs/{done.pk}/")
    assert (await ended.connect())[0]
    rows, page = [await ended.receive_from(timeout=5) for _ in range(2)]  # the catch-up
    assert "verdict-passed" in rows and "Completed" in page  # then it closes
    assert (await ended.receive_output(timeout=5))["type"] == "websocket.close"


async def test_stop_reaches_an_evaluation_another_process_replays_through_the_channel_layer() -> (
    None
):
    """The Stop of a page served by one process, for the task of another: only the channel
    layer joins them (nothing of this process executes it)."""
    elsewhere = asyncio.create_task(asyncio.sleep(30))
    listening = asyncio.create_task(tasks.EVALUATIONS.listen(4242, elsewhere))
    await asyncio.sleep(0.05)  # joined its control group

    await lifecycle.request_stop(4242)

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(elsewhere, 5)
    listening.cancel()
    await asyncio.gather(listening, return_exceptions=True)


def test_with_no_case_set_yet_the_page_says_how_to_make_one(ada: Any) -> None:
    page = make.logged_in(ada).get(reverse("chat:evals:index")).content.decode()
    assert "There is no case set yet" in page and 'id="run-form"' not in page
    assert "No evaluation has run yet." in page
