from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from chat import agent, inspector
from chat.agent.clients import OpenAICompatibleChatClient
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.evals import compare, replay
from chat.models import Conversation, EvalResult, EvalRun, ModelCall, Run, ToolCall
from chat.testing import evals as made_for
from chat.testing import factories as make
from chat.testing.openai_script import text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)
KEY = "sk-inspector-canary-123456"


def conversation_of(owner: Any) -> Conversation:
    return make.conversation(owner, enabled_tools=["get_current_time"], max_event_loops=5)


def test_inspector_shows_every_step_as_it_went_over_the_wire(
    client_in: Client, user: Any, fake_openai: FakeOpenAIServer, settings: Any
) -> None:
    settings.OPENAI_API_KEY = KEY
    fake_openai.enqueue(
        tool_turn([("call_1", "get_current_time", '{"timezone": "UTC"}')], usage=(11, 7)),
        text_turn("It is noon.", usage=(30, 4)),
    )
    conversation = conversation_of(user)
    client = OpenAICompatibleChatClient(
        base_url=fake_openai.base_url, api_key=KEY, model="m-1", backoff=0
    )
    run = make.run_turn(conversation, "time?", client)
    assert run.status == "completed"

    url = reverse("chat:run_inspect", args=[conversation.pk, run.pk])
    html = client_in.get(url).content.decode()

    assert "Step 1 of 5" in html and "Step 2 of 5" in html
    assert "tool_calls" in html and "stop" in html
    assert "11 in · 7 out" in html and "30 in · 4 out" in html
    sent = [r.body for r in fake_openai.requests]
    for call in ModelCall.objects.filter(run=run):
        assert call.request == sent[call.step - 1]
        chunks = call.raw_chunks()
        assert chunks and chunks[-1][1] == "data: [DONE]"
        assert [float(ms) for ms, _ in chunks] == sorted(float(ms) for ms, _ in chunks)
    assert "&quot;timezone&quot;: &quot;UTC&quot;" in html
    assert "Copy as curl" in html and "Bearer $OPENAI_API_KEY" in html
    assert f"{fake_openai.base_url}/chat/completions" in html
    assert KEY not in html
    assert "Get current time" in html and "&quot;iso&quot;" in html
    step_one = html.split('id="inspect-')[1]
    # A step's tool input and output come before its full request.
    assert step_one.index('class="inspect-tool"') < step_one.index('class="inspect-request"')


def test_inspector_respects_ownership(client_in: Client, user: Any) -> None:
    other = get_user_model().objects.create_user("mallory", password="pw-123456789")
    theirs = conversation_of(other)
    run = make.run_turn(theirs, "hi", ScriptedChatClient(["x"]))
    mine = conversation_of(user)
    assert client_in.get(reverse("chat:run_inspect", args=[theirs.pk, run.pk])).status_code == 404
    assert client_in.get(reverse("chat:run_inspect", args=[mine.pk, run.pk])).status_code == 404
    assert Client().get(reverse("chat:run_inspect", args=[theirs.pk, run.pk])).status_code == 302


def test_scripted_runs_have_no_curl_and_the_footer_shows_a_timeline(
    client_in: Client, user: Any
) -> None:
    conversation = conversation_of(user)
    make.run_turn(conversation, "what time is it?", ScriptedChatClient())
    page = client_in.get(reverse("chat:conversation_detail", args=[conversation.pk]))
    html = page.content.decode()
    assert 'class="timeline"' in html
    assert "1 · model" in html and "2 · model" in html
    assert "timeline-tool timeline-completed" in html
    run = Run.objects.get()
    inspect = client_in.get(reverse("chat:run_inspect", args=[conversation.pk, run.pk]))
    assert "Copy as curl" not in inspect.content.decode()
    assert "Raw stream" in inspect.content.decode()


def test_raw_stream_storage_can_be_turned_off(client_in: Client, user: Any, settings: Any) -> None:
    settings.AGENTLAB_STORE_RAW_STREAM = False
    conversation = conversation_of(user)
    run = make.run_turn(conversation, "hello", ScriptedChatClient(["hi"]))
    html = client_in.get(reverse("chat:run_inspect", args=[conversation.pk, run.pk])).content
    assert b"(not kept)" in html
    assert ModelCall.objects.get(run=run).raw_stream == ""


def test_each_step_shows_the_tools_offered_and_flags_a_call_of_one_never_offered(
    client_in: Client, user: Any
) -> None:
    conversation = make.conversation(user, enabled_tools=["get_current_time", "search_cards"])
    asked = (
        agent.ToolCall(id="c1", name="get_current_time", arguments="{}"),
        agent.ToolCall(id="c2", name="launch_rockets", arguments="{}"),
    )
    turns = [ScriptedTurn(tool_calls=asked), ScriptedTurn(text="One of them worked.")]
    run = make.run_turn(conversation, "time and rockets", ScriptedChatClient(turns))

    found = inspector.steps(run)
    assert [(offer.name, offer.called) for offer in found[0].offered] == [
        ("get_current_time", True),
        ("search_cards", False),
    ]
    assert [(called.call.name, called.offered) for called in found[0].calls] == [
        ("get_current_time", True),
        ("launch_rockets", False),
    ]
    assert found[0].unoffered == ["launch_rockets"]
    assert [offer.called for offer in found[1].offered] == [False, False]

    url = reverse("chat:run_inspect", args=[conversation.pk, run.pk])
    html = client_in.get(url).content.decode()
    lines = [
        re.sub(r"<[^>]+>", "", line)
        for line in re.findall(r'<p class="inspect-offered">(.*?)</p>', html)
    ]
    assert lines == [
        "Offered: get_current_time called, search_cards · called but not offered: launch_rockets",
        "Offered: get_current_time, search_cards",
    ]
    assert '<code>launch_rockets</code> <span class="offer-flag">not offered</span>' in html
    assert html.count('class="offer-flag">not offered') == 1
    assert "pill-unknown_tool" in html


def test_a_step_without_its_request_claims_nothing_about_offers() -> None:
    call = ToolCall(name="get_current_time")
    step = inspector.Step(1, None, [call])
    assert step.offered == [] and step.unoffered == []
    assert [(c.call, c.offered) for c in step.calls] == [(call, True)]


def test_the_inspector_opens_with_the_runs_waterfall(client_in: Client, user: Any) -> None:
    conversation = conversation_of(user)
    run = make.run_turn(conversation, "what time is it?", ScriptedChatClient())
    html = client_in.get(reverse("chat:run_inspect", args=[conversation.pk, run.pk])).content
    text = html.decode()
    assert text.index('<svg class="waterfall waterfall-wide"') < text.index('class="inspect-step"')
    assert text.count('<svg class="waterfall waterfall-narrow"') == 1
    label = re.search(r'<svg class="waterfall waterfall-wide"[^>]* aria-label="([^"]*)"', text)
    assert label is not None
    assert re.fullmatch(r"Run of \d+\.\d\d s: 2 model calls, 1 tool call", label.group(1))


# A run on a page of its own: where "Inspect" on an evaluation's attempt leads.


def evaluated(owner: Any) -> EvalRun:
    """One case, evaluated twice on the scripted model: two replays, each a run."""
    case = made_for.search_case(owner)
    return replay.evaluate([case], replay.target(), user=owner, case_set=case.case_set, repeat=2)


def inspect_links(html: str) -> list[str]:
    return re.findall(r'<a class="eval-inspect" href="([^"]*)"', html)


def run_page(result: EvalResult) -> str:
    assert result.run is not None
    return reverse("chat:run_detail", args=[result.run.conversation_id, result.run_id])


WRITABLE = ['id="composer"', "ws-send", "ws-connect", "Regenerate", "Agent settings", "Fork"]


def test_inspect_on_an_attempt_opens_its_run_read_only_with_the_way_back(
    client_in: Client, user: Any
) -> None:
    done = evaluated(user)
    first, second = replay.results(done)
    evaluation = reverse("chat:evals:run", args=[done.pk])

    listed = client_in.get(evaluation).content.decode()
    assert inspect_links(listed) == [run_page(first), run_page(second)]

    response = client_in.get(run_page(first))
    assert response.status_code == 200
    html = response.content.decode()
    assert f'href="{evaluation}"' in html and f"Back to evaluation #{done.pk}" in html
    assert "attempt 1 of 2" in html and made_for.QUESTION in html
    assert "verdict-passed" in html and "search_cards" in html
    assert '<svg class="waterfall waterfall-wide"' in html
    assert "Step 1 of" in html and 'class="inspect-request"' in html
    assert [text for text in WRITABLE if text in html] == []
    assert " style=" not in html


def test_inspect_from_a_comparison_leads_back_to_it(client_in: Client, user: Any) -> None:
    case = made_for.search_case(user)
    chosen = [replay.target(), replay.target()]
    comparison, eval_runs = compare.create_comparison(
        [case], chosen, user=user, case_set=case.case_set
    )
    asyncio.run(compare.run_comparison(eval_runs, chosen, [case], user=user))
    results = [result for eval_run in eval_runs for result in replay.results(eval_run)]

    page = client_in.get(reverse("chat:evals:comparison", args=[comparison.pk])).content.decode()
    assert inspect_links(page) == [run_page(result) for result in results]

    html = client_in.get(run_page(results[1])).content.decode()
    assert f'href="{reverse("chat:evals:comparison", args=[comparison.pk])}"' in html
    assert f'href="{reverse("chat:evals:run", args=[eval_runs[1].pk])}"' in html


def test_a_replays_chat_address_leads_to_its_run_page(client_in: Client, user: Any) -> None:
    """A replay is no chat to write in: its owner and a teammate both land on the run's page."""
    (result, _) = replay.results(evaluated(user))
    assert result.run is not None
    chat_address = reverse("chat:conversation_detail", args=[result.run.conversation_id])

    assert client_in.get(chat_address).url == run_page(result)  # type: ignore[attr-defined]
    teammate = Client()
    teammate.force_login(get_user_model().objects.create_user("bo", password="pw-123456789"))
    response = teammate.get(chat_address, follow=True)
    assert response.redirect_chain == [(run_page(result), 302)]
    assert [text for text in WRITABLE if text in response.content.decode()] == []


def test_a_chat_runs_page_is_its_readers_and_leads_back_to_the_turn(
    client_in: Client, user: Any
) -> None:
    mine = conversation_of(user)
    run = make.run_turn(mine, "what time is it?", ScriptedChatClient())
    other = get_user_model().objects.create_user("mallory", password="pw-123456789")
    theirs = conversation_of(other)
    their_run = make.run_turn(theirs, "hi", ScriptedChatClient(["x"]))

    html = client_in.get(reverse("chat:run_detail", args=[mine.pk, run.pk])).content.decode()
    back = reverse("chat:conversation_detail", args=[mine.pk]) + f"?run={run.pk}#turn-{run.pk}"
    assert f'href="{back}"' in html and "Back to the conversation" in html
    assert '<svg class="waterfall waterfall-wide"' in html
    page = reverse("chat:run_detail", args=[theirs.pk, their_run.pk])
    assert client_in.get(page).status_code == 404
    elsewhere = reverse("chat:run_detail", args=[mine.pk, their_run.pk])
    assert client_in.get(elsewhere).status_code == 404
    assert Client().get(page).status_code == 302
    assert client_in.get(reverse("chat:conversation_detail", args=[mine.pk])).status_code == 200
