from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from chat import agent, inspector
from chat.agent.clients import OpenAICompatibleChatClient
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.models import Conversation, ModelCall, Run, ToolCall
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


def test_the_indicator_counts_steps() -> None:
    from chat.fragments import LiveState, render

    state = LiveState(running={"c": "get_current_time"}, step=2, max_steps=8)
    html = render("indicator", {"key": 1, "live": state})
    assert "Looking up: Get current time" in html and "step 2 of 8" in html
    single = render("indicator", {"key": 1, "live": LiveState(running={"c": "x"}, max_steps=1)})
    assert "step" not in single


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
