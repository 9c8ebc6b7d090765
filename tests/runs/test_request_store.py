"""Requests as runs store them: a long conversation with tool rounds, made through the runtime
against a real HTTP provider, keeps every request byte for byte while the stored bytes per
model call stay flat."""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chat import agent
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.agent.wire import encode_body
from chat.models import Conversation, ModelCall
from chat.models.request_store import StoredRequestError
from chat.testing import factories as make
from chat.testing.openai_script import ScriptedResponse, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer, client_for
from chat.transcripts import versions
from chat.transcripts.export import full_record, full_text

pytestmark = pytest.mark.django_db(transaction=True)
TURNS = 30
ROUNDS = 9
"""Tool rounds a turn: with its reply, ten model calls a turn, 300 in the conversation."""


def script(turn: int) -> list[ScriptedTurn]:
    """A turn of tool rounds (the time asked again and again), then a reply."""
    rounds = [
        ScriptedTurn(
            text=f"Checking the clock, round {number}.",
            tool_calls=(
                agent.ToolCall(id=f"t{turn}r{number}", name="get_current_time", arguments="{}"),
            ),
        )
        for number in range(ROUNDS)
    ]
    return [*rounds, ScriptedTurn(f"Turn {turn}: the clock agreed {ROUNDS} times.")]


def answer(body: Any) -> ScriptedResponse:
    """A tool round for each user message, then a reply."""
    last = body["messages"][-1]
    if last["role"] == "user":
        return tool_turn([(f"call{len(body['messages'])}", "get_current_time", "{}")])
    return text_turn(f"It is {last['content'][:40]}, as the tool said.")


def stored(call: ModelCall) -> int:
    return len(call.request_delta.encode())


@database_sync_to_async
def queries_to_read(pk: int) -> int:
    with CaptureQueriesContext(connection) as queries:
        ModelCall.objects.get(pk=pk).request  # noqa: B018
    return len(queries)


@database_sync_to_async
def calls_of(made: Conversation) -> list[ModelCall]:
    return list(ModelCall.objects.filter(run__conversation=made).order_by("pk"))


async def test_a_long_conversation_keeps_every_request_exactly_in_flat_storage() -> None:
    made = await make.aconversation(enabled_tools=["get_current_time"], max_event_loops=20)
    client = ScriptedChatClient([turn for number in range(TURNS) for turn in script(number)])
    started = time.monotonic()
    for turn in range(TURNS):
        run = await (await make.start_as_owner(made, f"Check the clock ({turn})", client)).task
        assert (run.status, run.steps) == ("completed", ROUNDS + 1), run.error
    elapsed = time.monotonic() - started

    calls = await calls_of(made)
    assert len(calls) == len(client.requests) == TURNS * (ROUNDS + 1) == 300
    for call, body in zip(calls, client.requests, strict=True):
        payload = encode_body(body)
        assert call.request_sha256 == hashlib.sha256(payload).hexdigest()
        assert encode_body(call.request) == payload  # every body from one chain query
    assert calls[0].request_base_id is None
    assert all(call.request_base_id == before.pk for before, call in itertools.pairwise(calls))
    assert await queries_to_read(calls[-1].pk) == 2  # the call, then its chain at once

    sizes = [stored(call) for call in calls]
    per_turn = [sum(sizes[start : start + ROUNDS + 1]) for start in range(0, 300, ROUNDS + 1)]
    whole = len(encode_body(client.requests[-1]))
    assert per_turn[-1] <= 2 * per_turn[0], (per_turn[0], per_turn[-1])
    assert max(sizes[-20:]) <= 2 * max(sizes[1:21]), (sizes[1:21], sizes[-20:])
    assert sum(sizes) < 2 * whole, (sum(sizes), whole)  # not the sum of every history
    print(
        f"{TURNS} turns, 300 model calls in {elapsed:.1f}s; stored bytes of call 1: {sizes[0]}, "
        f"2: {sizes[1]}, 300: {sizes[-1]}; turn 1: {per_turn[0]}, turn {TURNS}: {per_turn[-1]}; "
        f"all calls: {sum(sizes)}; the last request whole: {whole}"
    )


@database_sync_to_async
def tampered(made: Conversation) -> list[int]:
    """The tampered call, and the last one, which extends it."""
    pks = list(ModelCall.objects.order_by("pk").values_list("pk", flat=True))
    return [pks[2], pks[-1]]


@database_sync_to_async
def export_and_reread(made: Conversation) -> tuple[list[Any], list[bytes]]:
    fetched = Conversation.objects.for_export(full=True)
    record = full_record(fetched.get(pk=made.pk))
    text = "".join(full_text(fetched.get(pk=made.pk)))  # the line the export command writes
    assert text == json.dumps(record, ensure_ascii=False)
    exported = [call["request"] for run in json.loads(text)["runs"] for call in run["model_calls"]]
    fresh = [encode_body(call.request) for call in ModelCall.objects.order_by("pk")]
    return exported, fresh


async def test_an_export_carries_each_request_whole_and_a_broken_chain_names_its_call(
    fake_openai: FakeOpenAIServer,
) -> None:
    made = await make.aconversation(enabled_tools=["get_current_time"])
    fake_openai.responder = answer
    client = client_for(fake_openai.base_url)
    for turn in range(3):
        await (await make.start_as_owner(made, f"time? {turn}", client)).task
    await client.aclose()
    sent = [request.raw for request in fake_openai.requests]

    exported, fresh = await export_and_reread(made)
    assert [encode_body(body) for body in exported] == fresh == sent

    @database_sync_to_async
    def break_one() -> str:
        middle = ModelCall.objects.order_by("pk")[2]
        ModelCall.objects.filter(pk=middle.pk).update(
            request_delta=middle.request_delta.replace("time?", "tide?")
        )
        said = []
        for call in (ModelCall.objects.get(pk=middle.pk), ModelCall.objects.order_by("pk").last()):
            with pytest.raises(StoredRequestError) as caught:
                call.request  # noqa: B018
            said.append(str(caught.value).split(":")[0])
        return said

    assert await break_one() == [f"model call {pk}" for pk in (await tampered(made))]


async def test_after_switching_back_a_request_extends_the_path_it_continues() -> None:
    made = await make.aconversation()
    client = ScriptedChatClient()
    for turn in range(6):
        await (await make.start_as_owner(made, f"Tell me about item {turn} " * 20, client)).task
    long_path = (await calls_of(made))[-1]
    await (await make.start_as_owner(made, "A new start.", client, version_from=0)).task
    assert await database_sync_to_async(versions.switch)(made, 0, 1)  # back to the long one
    await (await make.start_as_owner(made, "And one more thing.", client)).task

    *_, short_branch, last = await calls_of(made)
    assert len(client.requests[-1]["messages"]) == 2 * 6 + 1  # the long path, continued
    assert last.request_base_id == long_path.pk != short_branch.pk
    assert len(last.request_delta) < len(encode_body(client.requests[-1])) / 5  # two messages
    assert encode_body(last.request) == encode_body(client.requests[-1])
