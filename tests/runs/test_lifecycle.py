"""Tests of chat.runs.lifecycle: starting, executing and cancelling runs, and what they store."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from channels.db import database_sync_to_async

from chat import agent, runs, transcripts
from chat.agent import events, history
from chat.agent.errors import StreamError
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.models import Conversation, Message, ModelCall, Run, ToolCall
from chat.runs import tasks
from chat.testing import factories as make

pytestmark = pytest.mark.django_db(transaction=True)


append_messages = database_sync_to_async(transcripts.append_messages)


async def run_once(conversation: Conversation, content: str, client: object) -> Run:
    handle = await make.start_as_owner(conversation, content, client)  # type: ignore[arg-type]
    run = await handle.task
    await run.arefresh_from_db()
    return run


def call(id: str, name: str, arguments: str = "{}") -> agent.ToolCall:
    return agent.ToolCall(id=id, name=name, arguments=arguments)


async def test_run_persists_messages_tool_calls_and_model_calls() -> None:
    conversation = await make.aconversation(
        enabled_tools=["get_current_time", "handoff_note"], tool_policies={"handoff_note": "run"}
    )
    client = ScriptedChatClient(
        [
            ScriptedTurn(
                text="Let me check.",
                tool_calls=(
                    call("a", "get_current_time"),
                    call("b", "handoff_note", '{"note":"x"}'),
                ),
                usage=(10, 5),
            ),
            ScriptedTurn("It is noon.", usage=(30, 4)),
        ]
    )
    run = await run_once(conversation, "time and note", client)

    assert run.status == "completed" and run.steps == 2
    assert (run.prompt_tokens, run.completion_tokens, run.total_tokens) == (40, 9, 49)
    assert run.time_to_first_token is not None and run.duration is not None
    messages = await make.ahistory(conversation)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert messages[1].content == "Let me check."
    assert [m.tool_call_id for m in messages[2:4]] == ["a", "b"]
    assert history.validate(messages) == []

    logs = [t async for t in ToolCall.objects.filter(run=run).order_by("position")]
    assert [(t.name, t.status) for t in logs] == [
        ("get_current_time", "completed"),
        ("handoff_note", "completed"),
    ]
    assert json.loads(logs[1].result)["note"] == "x"
    model_calls = [m async for m in ModelCall.objects.filter(run=run).order_by("step")]
    assert [m.finish_reason for m in model_calls] == ["tool_calls", "stop"]
    assert model_calls[1].request["messages"][1]["tool_calls"][0]["id"] == "a"
    assert model_calls[0].prompt_tokens == 10 and model_calls[0].http_status == 200
    await conversation.arefresh_from_db()
    assert conversation.title == "time and note"


async def test_continuation_sends_the_stored_history() -> None:
    conversation = await make.aconversation()
    client = ScriptedChatClient(["first answer", "second answer"])
    await run_once(conversation, "first", client)
    await run_once(conversation, "second", client)

    sent = client.requests[1]["messages"]
    assert [(m["role"], m["content"]) for m in sent] == [
        ("user", "first"),
        ("assistant", "first answer"),
        ("user", "second"),
    ]


async def test_writes_do_not_grow_with_reply_length() -> None:
    conversation = await make.aconversation()
    long_reply = " ".join(f"word{i}" for i in range(2000))
    run = await run_once(conversation, "talk", ScriptedChatClient([long_reply]))

    assert await Message.objects.filter(run=run).acount() == 2
    assert (await make.ahistory(conversation))[-1].content == long_reply


async def test_failed_run_keeps_partial_text_and_next_message_works() -> None:
    conversation = await make.aconversation()
    broken = ScriptedChatClient(
        [ScriptedTurn("Half of", error=StreamError("the connection dropped mid-stream"))]
    )
    run = await run_once(conversation, "go", broken)

    assert run.status == "failed" and "dropped" in run.error
    messages = await make.ahistory(conversation)
    assert [(m.role, m.content) for m in messages] == [("user", "go"), ("assistant", "Half of")]
    model_call = await ModelCall.objects.aget(run=run)
    assert "dropped" in model_call.error and model_call.request["messages"]

    run2 = await run_once(conversation, "again", ScriptedChatClient(["fine"]))
    assert run2.status == "completed"


@pytest.mark.parametrize(
    ("stop", "status", "reply", "tool_status"),
    # A stopping process does not end its runs: it lets them go for another to resume
    # (tests/runs/test_resume.py).
    [("cancel", "cancelled", "Cancelled by the user", "cancelled")],
)
async def test_a_run_stopped_mid_tool_answers_the_dangling_calls(
    stop: str, status: str, reply: str, tool_status: str
) -> None:
    release = asyncio.Event()

    async def slow(arguments: dict[str, object]) -> str:
        await release.wait()
        return "never"

    agent.default_registry.register(
        agent.ToolDefinition(name="sleepy_tool", description="x"), slow, read_only=True
    )
    try:
        conversation = await make.aconversation(enabled_tools=["sleepy_tool", "get_current_time"])
        client = ScriptedChatClient(
            [
                ScriptedTurn(
                    text="Checking both.",
                    tool_calls=(call("t", "get_current_time"), call("s", "sleepy_tool")),
                )
            ]
        )
        one_done = asyncio.Event()
        finished: list[events.RunEvent] = []

        async def listener(run: Run, event: events.RunEvent) -> None:
            finished.append(event)
            if isinstance(event, events.ToolCallFinished):
                one_done.set()

        handle = await make.start_as_owner(conversation, "go", client, [listener])
        await asyncio.wait_for(one_done.wait(), 5)
        if stop == "cancel":
            assert runs.cancel_run(handle.run.pk)
            with pytest.raises(asyncio.CancelledError):
                await handle.task
        else:
            assert await runs.wind_up_all(5) == 1
            assert handle.task.done()
            with pytest.raises(runs.RunRefused, match="restarting"):
                await make.start_as_owner(conversation, "again", ScriptedChatClient(["x"]))
    finally:
        agent.default_registry.unregister("sleepy_tool")
        tasks.stopping.clear()

    run = await Run.objects.aget(pk=handle.run.pk)
    assert run.status == status
    stored = await make.ahistory(conversation)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "tool"]
    assert stored[1].content == "Checking both."
    assert json.loads(stored[2].content or "")["timezone"] == "UTC"
    assert reply in (stored[3].content or "")
    assert history.validate(stored) == []
    statuses = {t.name: t.status async for t in ToolCall.objects.filter(run=run)}
    assert statuses == {"get_current_time": "completed", "sleepy_tool": tool_status}
    assert isinstance(finished[-1], events.RunFinished) and finished[-1].status == status
    assert not runs.cancel_run(run.pk)


async def test_cancel_mid_stream_keeps_what_streamed() -> None:
    conversation = await make.aconversation()
    client = ScriptedChatClient([" ".join(["slow"] * 200)], delay=0.01)
    seen = asyncio.Event()

    async def listener(run: Run, event: events.RunEvent) -> None:
        if isinstance(event, events.TextDelta):
            seen.set()

    handle = await make.start_as_owner(conversation, "go", client, [listener])
    await asyncio.wait_for(seen.wait(), 5)
    await asyncio.sleep(0.05)
    handle.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handle.task

    messages = await make.ahistory(conversation)
    assert messages[-1].role == "assistant"
    partial = messages[-1].content or ""
    assert partial.startswith("slow") and len(partial) < len(" ".join(["slow"] * 200))
    model_call = await ModelCall.objects.aget(run=handle.run)
    assert model_call.error == "Cancelled by the user."


async def test_one_run_at_a_time_and_refusals_write_nothing() -> None:
    conversation = await make.aconversation()
    client = ScriptedChatClient(["x " * 100], delay=0.01)
    owner = await database_sync_to_async(lambda: conversation.owner)()
    handle = await runs.start_run(conversation=conversation, user=owner, content="a", client=client)

    with pytest.raises(runs.RunRefused, match="already in progress"):
        await runs.start_run(conversation=conversation, user=owner, content="b", client=client)
    with pytest.raises(runs.RunRefused, match="empty"):
        await runs.start_run(conversation=conversation, user=owner, content="  ", client=client)
    with pytest.raises(runs.RunRefused, match="too long"):
        await runs.start_run(
            conversation=conversation, user=owner, content="x" * 40_000, client=client
        )
    handle.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handle.task
    contents = [m.content for m in await make.ahistory(conversation) if m.role == "user"]
    assert contents == ["a"]
    assert await Run.objects.filter(conversation=conversation).acount() == 1


@pytest.mark.parametrize("tries", range(5))
async def test_a_burst_of_sends_starts_exactly_one_run(tries: int) -> None:
    """Five sockets send at once: one run starts, four are refused, the history stays strict.

    A run this process had created but not yet registered as a task was judged dead by the
    second sender and interrupted, and two runs then interleaved their messages.
    """
    conversation = await make.aconversation(enabled_tools=["get_current_time"])
    owner = await database_sync_to_async(lambda: conversation.owner)()

    async def send(number: int) -> runs.RunHandle | str:
        client = ScriptedChatClient(
            [ScriptedTurn(tool_calls=(call(f"c{number}", "get_current_time"),)), "done"]
        )
        try:
            return await runs.start_run(
                conversation=conversation, user=owner, content=f"m{number}", client=client
            )
        except runs.RunRefused as exc:
            return str(exc)

    outcomes = await asyncio.gather(*(send(number) for number in range(5)))
    handles = [outcome for outcome in outcomes if isinstance(outcome, runs.RunHandle)]
    assert len(handles) == 1, outcomes
    assert all("already in progress" in o for o in outcomes if isinstance(o, str))
    run = await handles[0].task
    await run.arefresh_from_db()
    assert run.status == "completed"
    stored = await make.ahistory(conversation)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert history.validate(stored) == []
    assert await Run.objects.filter(conversation=conversation).acount() == 1


async def test_repair_answers_dangling_calls_left_by_a_crash() -> None:
    conversation = await make.aconversation()

    @database_sync_to_async
    def crash_state() -> tuple[int, int]:
        transcripts.append_messages(
            conversation,
            [
                agent.ChatMessage(role="user", content="q"),
                agent.ChatMessage(role="assistant", tool_calls=(call("a", "x"), call("b", "y"))),
                agent.ChatMessage(role="tool", tool_call_id="a", content="done"),
                agent.ChatMessage(role="tool", tool_call_id="zzz", content="orphan"),
            ],
        )
        return transcripts.repair_conversation(conversation, reason="interrupted")

    assert await crash_state() == (1, 1)
    messages = await make.ahistory(conversation)
    assert [m.tool_call_id for m in messages if m.role == "tool"] == ["a", "b"]
    assert "interrupted" in (messages[-1].content or "")
    assert history.validate(messages) == []
    indexes = [i async for i in conversation.messages.values_list("index", flat=True)]
    assert indexes == [0, 1, 2, 3]


crashed_run = database_sync_to_async(make.crashed_run)


async def test_runs_of_dead_processes_are_interrupted_and_repaired() -> None:
    import socket

    conversation = await make.aconversation()
    other = await make.aconversation()
    dead = await crashed_run(conversation, f"{socket.gethostname()}:999999999:abc")
    alive_elsewhere = await crashed_run(other, "other-host:1:abc")

    recovered = await database_sync_to_async(runs.recover_interrupted_runs)()

    assert [r.pk for r in recovered] == [dead.pk]
    await dead.arefresh_from_db()
    assert dead.status == "interrupted" and "stopped" in dead.error
    messages = await make.ahistory(conversation)
    assert history.validate(messages) == []
    assert "Interrupted" in (messages[-1].content or "")
    assert (await ToolCall.objects.aget(run=dead)).status == "failed"
    await alive_elsewhere.arefresh_from_db()
    assert alive_elsewhere.status == "in_progress"


async def test_a_stale_run_does_not_block_the_next_message() -> None:
    conversation = await make.aconversation()
    stale = await crashed_run(conversation, "other-host:1:abc", age=3600)

    run = await run_once(conversation, "hello again", ScriptedChatClient(["hi"]))

    assert run.status == "completed"
    await stale.arefresh_from_db()
    assert stale.status == "interrupted"
    assert history.validate(await make.ahistory(conversation)) == []


async def test_a_tool_not_available_here_stays_chosen_and_is_not_offered() -> None:
    conversation = await make.aconversation(enabled_tools=["get_current_time"])
    conversation.parameters["enabled_tools"] = ["get_current_time", "retired_tool"]
    await conversation.asave()
    client = ScriptedChatClient()

    run = await run_once(conversation, "what time is it?", client)

    assert run.status == "completed"
    offered = [tool["function"]["name"] for tool in client.requests[0]["tools"]]
    assert offered == ["get_current_time"]
    assert run.parameters["enabled_tools"] == ["get_current_time", "retired_tool"]
    await conversation.arefresh_from_db()
    assert conversation.parameters["enabled_tools"] == ["get_current_time", "retired_tool"]


async def test_a_run_whose_conversation_is_deleted_stops_quietly() -> None:
    conversation = await make.aconversation()
    client = ScriptedChatClient([" ".join(["word"] * 100)], delay=0.005)
    handle = await make.start_as_owner(conversation, "go", client)
    await asyncio.sleep(0.05)
    await conversation.adelete()
    run = await asyncio.wait_for(handle.task, 5)
    assert run.pk == handle.run.pk
    assert not await Run.objects.filter(pk=run.pk).aexists()


async def test_model_calls_keep_the_raw_stream_and_url(settings: Any) -> None:
    conversation = await make.aconversation()
    run = await run_once(conversation, "hi", ScriptedChatClient(["raw words here"]))
    model_call = await ModelCall.objects.aget(run=run)
    chunks = model_call.raw_chunks()
    assert model_call.url == "scripted:"
    assert chunks[-1][1] == "data: [DONE]"
    assert all(float(ms) >= 0 for ms, _ in chunks)
    assert (
        "".join(
            json.loads(line[6:])["choices"][0]["delta"].get("content", "")
            for _, line in chunks
            if line.startswith("data: {") and json.loads(line[6:])["choices"]
        )
        == "raw words here"
    )

    settings.AGENTLAB_STORE_RAW_STREAM = False
    run = await run_once(conversation, "again", ScriptedChatClient(["no raw"]))
    assert (await ModelCall.objects.aget(run=run)).raw_stream == ""


async def test_preflight_repairs_a_broken_stored_history() -> None:
    conversation = await make.aconversation()

    await append_messages(
        conversation,
        [
            agent.ChatMessage(role="user", content="q"),
            agent.ChatMessage(role="assistant", tool_calls=(call("lost", "x"),)),
        ],
    )
    client = ScriptedChatClient(["fine"])
    run = await run_once(conversation, "next", client)

    assert run.status == "completed"
    sent = client.requests[0]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    model_call = await ModelCall.objects.aget(run=run)
    assert model_call.preflight and "unanswered_tool_call" in model_call.preflight[0]


async def test_preflight_refuses_what_it_cannot_repair() -> None:
    conversation = await make.aconversation()

    await append_messages(
        conversation,
        [
            agent.ChatMessage(role="user", content="q"),
            agent.ChatMessage(role="assistant", tool_calls=(call("dup", "x"),)),
            agent.ChatMessage(role="tool", tool_call_id="dup", content="1"),
            agent.ChatMessage(role="assistant", tool_calls=(call("dup", "y"),)),
            agent.ChatMessage(role="tool", tool_call_id="dup", content="2"),
        ],
    )
    client = ScriptedChatClient(["never"])
    run = await run_once(conversation, "next", client)

    assert run.status == "failed"
    assert "Pre-flight" in run.error and "message 3" in run.error
    assert "duplicate_tool_call_id" in run.error
    assert client.requests == []


async def test_a_conversation_uses_its_provider_profile(
    fake_openai: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import re

    from chat.models import ProviderProfile
    from chat.testing.openai_script import text_turn, tool_turn

    monkeypatch.setenv("MISTRAL_TEST_KEY", "sk-profile-key")
    profile = await ProviderProfile.objects.acreate(
        name="mistral-like",
        base_url=fake_openai.base_url,
        api_key_env="MISTRAL_TEST_KEY",
        model="mistral-small",
        tool_call_ids="alnum9",
        parallel_tool_calls=False,
        available_to_everyone=True,
    )

    def mistral(body: Any) -> str | None:
        for message in body["messages"]:
            for call in message.get("tool_calls", []):
                if not re.match(r"^[a-zA-Z0-9]{9}$", call["id"]):
                    return f"Tool call id was {call['id']} but must be a-z, A-Z, 0-9, length 9"
        return "parallel_tool_calls is not supported" if "parallel_tool_calls" in body else None

    fake_openai.checks.append(mistral)
    fake_openai.enqueue(
        tool_turn([("call_not_nine", "get_current_time", "{}")]), text_turn("It is noon.")
    )
    conversation = await make.aconversation(enabled_tools=["get_current_time"])
    conversation.profile = profile
    await conversation.asave()
    owner = await database_sync_to_async(lambda: conversation.owner)()

    handle = await runs.start_run(conversation=conversation, user=owner, content="time?")
    run = await handle.task

    assert run.status == "completed", run.error
    assert run.model == "mistral-small"
    assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-profile-key"
    second = fake_openai.requests[1].body
    assert second["messages"][1]["tool_calls"][0]["id"] != "call_not_nine"
    messages = await make.ahistory(conversation)
    assert messages[1].tool_calls[0].id == "call_not_nine"


async def test_a_run_without_a_message_continues_from_a_tool_reply() -> None:
    conversation = await make.aconversation(enabled_tools=["get_current_time"])

    await append_messages(
        conversation,
        [
            agent.ChatMessage(role="user", content="time?"),
            agent.ChatMessage(role="assistant", tool_calls=(call("t1", "get_current_time"),)),
            agent.ChatMessage(role="tool", tool_call_id="t1", content='{"iso": "EDITED"}'),
        ],
    )
    client = ScriptedChatClient()
    run = await run_once(conversation, None, client)  # type: ignore[arg-type]

    assert run.status == "completed"
    assert [m["role"] for m in client.requests[0]["messages"]] == ["user", "assistant", "tool"]
    messages = await make.ahistory(conversation)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert "EDITED" in (messages[-1].content or "")


async def test_a_run_without_a_message_needs_something_to_answer() -> None:
    conversation = await make.aconversation()
    with pytest.raises(runs.RunRefused, match="must end with a user or a tool message"):
        await run_once(conversation, None, ScriptedChatClient(["x"]))  # type: ignore[arg-type]
    assert await Run.objects.acount() == 0


async def test_start_first_holds_streaming_runs_only_while_others_start() -> None:
    gate = runs.StartFirst()
    loop = asyncio.get_running_loop()

    began = loop.time()
    await gate.give_way()  # nobody starting: no wait at all
    assert loop.time() - began < 0.05

    leave = gate.enter()
    waiter = asyncio.ensure_future(gate.give_way())
    await asyncio.sleep(0.02)
    assert not waiter.done()  # held while a run starts
    leave()
    leave()  # leaving twice counts once
    await asyncio.wait_for(waiter, 1)
    assert gate.starting == 0

    gate.HOLD = 0.05
    stuck = gate.enter()
    began = loop.time()
    await gate.give_way()  # a start that never shows anything holds others HOLD at most
    assert 0.04 < loop.time() - began < 0.5
    stuck()


async def test_a_refused_or_finished_run_leaves_the_starting_count() -> None:
    conversation = await make.aconversation()
    owner = await database_sync_to_async(lambda: conversation.owner)()
    handle = await runs.start_run(
        conversation=conversation, user=owner, content="hi", client=ScriptedChatClient(["one"])
    )
    with pytest.raises(runs.RunRefused):
        await runs.start_run(
            conversation=conversation, user=owner, content="again", client=ScriptedChatClient()
        )
    await handle.task
    assert runs.START_FIRST.starting == 0
