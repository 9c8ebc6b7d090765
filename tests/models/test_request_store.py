"""Tests of chat.models.request_store: deltas rebuild bodies to the exact bytes, key order and
number spelling included; copies and imports are chained within their own conversation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db.models import RestrictedError

from chat import agent, transcripts
from chat.agent.wire import encode_body, payload_sha256
from chat.models import Conversation, ModelCall, Run, request_store
from chat.models.request_store import Stored, StoredRequestError, apply, delta, fold, store
from chat.testing import factories as make
from chat.transcripts import forks
from chat.transcripts.export import full_record
from chat.transcripts.imports import import_record
from chat.transcripts.records import FullRecord

TOOLS = [{"type": "function", "function": {"name": "get_current_time", "parameters": {}}}]


def body(*contents: str, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": content} for content in contents]
    return {"model": "m", "messages": messages, "stream": True, **extra}


def rebuilt(base: Any, after: Any) -> bytes:
    change = delta(base, after)
    assert change is not None
    return encode_body(apply(base, change))


@pytest.mark.parametrize(
    "after",
    [
        body("a", "b", "c", tools=TOOLS),  # appended messages
        body("a", "x", tools=TOOLS),  # an edit: the common start is kept
        body(tools=TOOLS),  # no message left
        {"messages": [{"role": "user", "content": "a"}], "model": "m", "tools": TOOLS},  # reordered
        body("a", "b", tools=TOOLS, temperature=1),  # 1 is not 1.0
        body("a", "b", tools=TOOLS, temperature=1.0, stream_options={"include_usage": True}),
        body("a", "b"),  # a key dropped
        {"tools": TOOLS, "messages": "not a list", "model": "m"},
        {"model": "m", "messages": [{"content": "a", "role": "user"}], "tools": TOOLS},  # keys
    ],
)
def test_a_delta_rebuilds_the_exact_bytes(after: dict[str, Any]) -> None:
    base = body("a", "b", tools=TOOLS, temperature=1.0)
    assert rebuilt(base, after) == encode_body(after)


def test_a_delta_holds_only_what_is_new() -> None:
    base = body(*(f"message {n}" for n in range(200)), tools=TOOLS)
    after = body(*(f"message {n}" for n in range(201)), tools=TOOLS)
    change = delta(base, after)
    assert change == {"keep": 200, "messages": [{"role": "user", "content": "message 200"}]}
    assert delta([1], after) is None and delta(base, "text") is None


def test_a_delta_that_would_not_rebuild_the_body_is_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = body(*(f"message {n}" for n in range(50)), tools=TOOLS)
    second = body(*(f"message {n}" for n in range(51)), tools=TOOLS)
    base, call = ModelCall(), ModelCall()
    store(base, first, "", bases=[])
    assert store(call, second, "", bases=[base]) is base  # a delta, when it rebuilds
    monkeypatch.setattr(request_store, "apply", lambda old, change, **_: {**old, "messages": []})

    assert store(call, second, "", bases=[base]) is None
    assert call.request_delta == encode_body(second).decode()
    assert call.request_sha256 == payload_sha256(encode_body(second))


def test_a_fold_checks_every_target_and_names_the_call() -> None:
    first, second = body("a", tools=TOOLS), body("a", "b", tools=TOOLS)
    text = encode_body(delta(first, second)).decode()
    rows = [
        Stored(1, None, encode_body(first).decode(), payload_sha256(encode_body(first))),
        Stored(2, 1, text, payload_sha256(encode_body(second))),
    ]
    assert fold(rows, targets={1, 2}) == {1: first, 2: second}
    assert fold(rows, targets={2}) == {2: second}
    wrong = [rows[0], rows[1]._replace(sha256="0" * 64)]
    with pytest.raises(StoredRequestError, match=r"^model call 2: the stored request"):
        fold(wrong, targets={2})
    with pytest.raises(StoredRequestError, match=r"^model call 2: its request extends model c"):
        fold([rows[1]], targets={2})


def test_a_request_extends_the_base_that_holds_most_of_it() -> None:
    long, short = body(*(f"m{n}" for n in range(40)), tools=TOOLS), body("m0", "x", tools=TOOLS)
    bases = [ModelCall(pk=1), ModelCall(pk=2)]
    bases[0].request, bases[1].request = short, long  # the branch left, the path continued
    call = ModelCall()
    after = body(*(f"m{n}" for n in range(41)), tools=TOOLS)
    assert store(call, after, "", bases=bases) is bases[1]
    assert call.request_base == bases[1] and call.request_sha256 == payload_sha256(
        encode_body(after)
    )
    assert encode_body(apply(long, json.loads(call.request_delta))) == encode_body(after)
    assert store(call, after, "", bases=[]) is None and call.request_base is None


def calls_of(conversation: Conversation) -> list[ModelCall]:
    return list(ModelCall.objects.filter(run__conversation=conversation).order_by("pk"))


def chain(conversation: Conversation, bodies: list[dict[str, Any]]) -> list[ModelCall]:
    """Calls of one run storing `bodies` the way a run does."""
    from chat.models.request_store import RequestChain

    run = Run.objects.create(conversation=conversation, status="completed", steps=len(bodies))
    transcripts.append_messages(
        conversation,
        [
            agent.ChatMessage(role="user", content="q"),
            agent.ChatMessage(role="assistant", content="a"),
        ],
        run=run,
    )
    requests = RequestChain(run)
    for step, sent in enumerate(bodies, start=1):
        requests.save(ModelCall(run=run, step=step), sent, payload_sha256(encode_body(sent)))
    return calls_of(conversation)


@pytest.mark.django_db
def test_imports_and_forks_chain_their_calls_in_their_own_conversation() -> None:
    owner = make.user()
    made = make.conversation(owner, enabled_tools=["get_current_time"])
    bodies = [body(*(f"m{n}" for n in range(count)), tools=TOOLS) for count in (1, 2, 3, 4)]
    original = chain(made, bodies)
    assert [call.request_base_id for call in original] == [None, *(c.pk for c in original[:-1])]

    record = FullRecord.model_validate(
        full_record(Conversation.objects.for_export(full=True).get(pk=made.pk))
    )
    imported, _ = import_record(record, user=owner)
    fork = forks.fork_conversation(made, owner=owner, at_message=1)
    for copy in (imported, fork):
        calls = calls_of(copy)
        assert [encode_body(call.request) for call in calls] == [encode_body(b) for b in bodies]
        assert calls[0].request_base_id is None
        assert [call.request_base_id for call in calls[1:]] == [c.pk for c in calls[:-1]]
        assert all(len(call.request_delta) < 200 for call in calls[1:])
    assert [call.request_sha256 for call in calls_of(fork)] == [c.request_sha256 for c in original]


@pytest.mark.django_db
def test_a_base_is_deleted_only_with_its_conversation() -> None:
    made = make.conversation(make.user())
    first, _ = chain(made, [body("a"), body("a", "b")])
    with pytest.raises(RestrictedError):
        first.delete()
    made.delete()
    assert not ModelCall.objects.exists()
