"""Replaying cases against a strict local OpenAI provider: the decision judged, the loop
continued from fixtures, and every request an ordinary ModelCall."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync
from django.test import override_settings

from chat.agent import decisions
from chat.evals import cases, replay
from chat.models import Conversation, EvalResult, EvalRun, ModelCall, ResultVerdict, Run
from chat.runs import tasks
from chat.testing import evals as made_for
from chat.testing import factories as make
from chat.testing.openai_script import MODEL, error, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)

SEARCH = ("call_1", "search_cards", '{"query": "pills"}')
T_OLD = datetime(2020, 1, 1, tzinfo=UTC)
TIME = ("call_2", "get_current_time", '{"timezone": "UTC"}')


@pytest.fixture
def owner() -> Any:
    return make.user()


@pytest.fixture
def case(owner: Any, fake_openai: FakeOpenAIServer) -> Any:
    """A case kept from a conversation held with the strict provider: it searched the cards
    for pills, then answered."""
    conversation = make.conversation(
        owner, "Pills", enabled_tools=["search_cards", "get_current_time"], system_prompts=["Hi."]
    )
    fake_openai.enqueue(tool_turn([SEARCH]), text_turn("Found the pills card."))
    make.run_turn(conversation, "Which card is about pills?", make_client(fake_openai))
    return cases.save_case(conversation, 0, set_name="cards", user=owner)


def make_client(server: FakeOpenAIServer) -> Any:
    from chat.testing.openai_server import client_for

    return client_for(server.base_url)


def on(server: FakeOpenAIServer) -> replay.Target:
    return replay.target(base_url=server.base_url, model=MODEL)


def test_the_case_keeps_the_request_as_it_was_sent(case: Any) -> None:
    assert [m["role"] for m in case.messages] == ["system", "user"]
    assert [t["function"]["name"] for t in case.tools] == ["search_cards", "get_current_time"]
    assert case.expected == {
        "tool_calls": [{"name": "search_cards", "arguments": {"query": "pills"}}]
    }
    assert case.fixtures[0]["name"] == "search_cards"
    assert '"Tool pills"' in case.fixtures[0]["content"]


def test_a_case_that_passes_and_one_that_fails(
    case: Any, owner: Any, fake_openai: FakeOpenAIServer
) -> None:
    other = cases.save_case(
        case.conversation,
        0,
        set_name="cards",
        user=owner,
        expected=decisions.expectation([("get_current_time", {"timezone": "Europe/Paris"})]),
    )
    fake_openai.enqueue(tool_turn([SEARCH], usage=(50, 7)), tool_turn([TIME]))
    # One at a time: the provider answers in the order the requests arrive.
    done = replay.evaluate([case, other], on(fake_openai), user=owner, concurrency=1)
    first, second = replay.results(done)
    assert (done.status, done.passed, done.failed, done.total) == ("completed", 1, 1, 2)
    assert first.verdict == ResultVerdict.PASSED, first.reason
    assert (first.prompt_tokens, first.completion_tokens) == (50, 7)
    assert first.latency is not None
    assert second.verdict == ResultVerdict.FAILED
    assert second.reason.startswith('get_current_time: arguments {"timezone": "UTC"}')
    assert fake_openai.pending == 0
    # The model saw the case's history and tools, and nothing was executed.
    sent = fake_openai.requests[-1].body
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    assert {t["function"]["name"] for t in sent["tools"]} == {"search_cards", "get_current_time"}
    # Every request is a ModelCall of an ordinary run, in a conversation hidden from the list.
    assert ModelCall.objects.filter(run=first.run).count() == 1
    assert first.run.conversation.purpose == "eval"
    assert list(Conversation.objects.chats()) == [case.conversation]
    replies = first.run.conversation.messages.filter(role="tool")
    assert [m.content for m in replies] == [decisions.NOT_RUN]
    assert first.run.status == "completed"


def test_repeat_reports_each_attempt(case: Any, owner: Any, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(tool_turn([SEARCH]), text_turn("No tool needed."), tool_turn([SEARCH]))
    done = replay.evaluate([case], on(fake_openai), user=owner, repeat=3)
    verdicts = sorted(r.verdict for r in replay.results(done))
    assert verdicts == ["failed", "passed", "passed"]
    assert (done.passed, done.failed, done.pass_rate) == (2, 1, pytest.approx(2 / 3))
    assert [r.attempt for r in replay.results(done)] == [1, 2, 3]


def test_continue_answers_from_the_fixtures_to_the_final_answer(
    case: Any, owner: Any, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.enqueue(tool_turn([SEARCH]), text_turn("The pills card says so."))
    done = replay.evaluate([case], on(fake_openai), user=owner, continue_loop=True)
    (result,) = replay.results(done)
    assert result.verdict == ResultVerdict.PASSED
    assert result.answer == "The pills card says so."
    answered = fake_openai.requests[-1].body["messages"][-1]
    assert answered["role"] == "tool"
    assert answered["content"] == case.fixtures[0]["content"]
    assert fake_openai.pending == 0
    assert ModelCall.objects.filter(run=result.run).count() == 2


def test_continue_with_a_fixture_missing_says_so_to_the_model(
    case: Any, owner: Any, fake_openai: FakeOpenAIServer
) -> None:
    other = ("call_9", "search_cards", '{"query": "stop button"}')
    fake_openai.enqueue(tool_turn([other]), text_turn("I could not look that up."))
    done = replay.evaluate([case], on(fake_openai), user=owner, continue_loop=True)
    (result,) = replay.results(done)
    assert result.verdict == ResultVerdict.FAILED
    answered = fake_openai.requests[-1].body["messages"][-1]
    assert "no recorded result for search_cards" in json.loads(answered["content"])["error"]
    (call,) = result.run.tool_calls.all()
    assert (call.status, call.failure) == ("failed", "tool_error")
    assert result.answer == "I could not look that up."


def test_a_provider_error_is_an_error_verdict(
    case: Any, owner: Any, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.enqueue(error(400, "model not found"))
    done = replay.evaluate([case], on(fake_openai), user=owner)
    (result,) = replay.results(done)
    assert result.verdict == ResultVerdict.ERROR
    assert "model not found" in result.reason
    assert result.got is None
    assert done.failed == 1
    assert ModelCall.objects.filter(run=result.run).count() == 1


def test_a_target_without_a_model_is_refused_before_anything_is_written(
    case: Any, fake_openai: FakeOpenAIServer
) -> None:
    with pytest.raises(replay.RunRefused, match="AGENTLAB_MODEL"):
        replay.target(base_url=fake_openai.base_url)
    assert not EvalRun.objects.exists()


def test_the_scripted_model_replays_a_case_kept_from_the_chat(owner: Any) -> None:
    case = made_for.search_case(owner)
    done = replay.evaluate([case], replay.target(), user=owner, repeat=2)
    assert (done.passed, done.failed) == (2, 0)
    assert done.label == "Scripted model (offline)"


async def test_stop_cancels_an_evaluation_and_keeps_what_was_done() -> None:
    owner = await sync(make.user)()
    conversation = await sync(make.conversation)(owner, "Pills", enabled_tools=["search_cards"])
    await (await make.start_as_owner(conversation, made_for.QUESTION)).task
    case = await sync(cases.save_case)(conversation, 0, set_name="cards", user=owner)
    chosen = replay.target()
    with override_settings(AGENTLAB_SCRIPTED_DELAY=0.2):
        eval_run = await sync(replay.create_eval_run)([case], chosen, user=owner, repeat=3)
        task = asyncio.create_task(
            replay.run_eval(eval_run, [case], chosen, user=owner, concurrency=1)
        )
        for _ in range(500):
            if await EvalResult.objects.filter(eval_run=eval_run).aexists():
                break
            await asyncio.sleep(0.02)
        assert tasks.EVALUATIONS.cancel(eval_run.pk)
        with pytest.raises(asyncio.CancelledError):
            await task
    await eval_run.arefresh_from_db()
    assert eval_run.status == "cancelled"
    assert 1 <= eval_run.done < 3
    assert eval_run.pk not in tasks.EVALUATIONS.running
    assert not await Run.objects.filter(status="in_progress").aexists()


async def test_stop_while_an_attempt_is_being_written_leaves_no_run_in_progress(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The attempt's rows are written in a thread, which Stop cannot interrupt: the run it
    made ends cancelled."""
    owner = await sync(make.user)()
    conversation = await sync(make.conversation)(owner, "Pills", enabled_tools=["search_cards"])
    await (await make.start_as_owner(conversation, made_for.QUESTION)).task
    case = await sync(cases.save_case)(conversation, 0, set_name="cards", user=owner)
    writing, prepare = threading.Event(), replay._prepare

    def slow_prepare(*args: Any) -> Any:
        writing.set()
        time.sleep(0.3)
        return prepare(*args)

    monkeypatch.setattr(replay, "_prepare", slow_prepare)
    chosen = replay.target()
    eval_run = await sync(replay.create_eval_run)([case], chosen, user=owner)
    task = asyncio.create_task(replay.run_eval(eval_run, [case], chosen, user=owner))
    await asyncio.to_thread(writing.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    attempt = await Run.objects.filter(conversation__purpose="eval").aget()
    assert (attempt.status, attempt.error) == ("cancelled", "Cancelled by the user.")
    await eval_run.arefresh_from_db()
    assert eval_run.status == "cancelled"


def test_a_case_message_is_read_as_a_transcript_message_is(
    case: Any, owner: Any, fake_openai: FakeOpenAIServer
) -> None:
    case.messages[1]["content"] = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    case.save(update_fields=["messages"])
    fake_openai.enqueue(tool_turn([SEARCH]))
    done = replay.evaluate([case], on(fake_openai), user=owner)
    (result,) = replay.results(done)
    assert result.verdict == ResultVerdict.PASSED, result.reason
    assert fake_openai.requests[-1].body["messages"][1]["content"] == "a\n\nb"


def test_a_stored_case_the_reader_refuses_is_an_error_verdict(
    case: Any, owner: Any, fake_openai: FakeOpenAIServer
) -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.com/pills.png"}}
    case.messages[1]["content"] = [{"type": "text", "text": "What is this?"}, image]
    case.save(update_fields=["messages"])
    sent = len(fake_openai.requests)
    done = replay.evaluate([case], on(fake_openai), user=owner)
    (result,) = replay.results(done)
    assert (done.status, result.verdict, result.run) == ("completed", ResultVerdict.ERROR, None)
    assert result.reason == (
        "The case cannot be replayed: messages.1: content: content part of type 'image_url' is "
        "not supported: only text parts are imported"
    )
    assert len(fake_openai.requests) == sent
