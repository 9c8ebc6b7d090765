"""Tests of chat.transcripts.versions and of runs that make versions: edit and resend,
regenerate, retry, switching, and every path staying a history a strict provider accepts."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from chat import agent, runs
from chat.agent import history
from chat.agent.errors import ProviderHTTPError
from chat.agent.scripted import ScriptedChatClient, ScriptedTurn
from chat.models import Conversation, Message, RunStatus, Version
from chat.testing import factories as make
from chat.transcripts import versions

pytestmark = pytest.mark.django_db(transaction=True)


def active(conversation: Conversation) -> list[tuple[int, str, str | None]]:
    return [(m.index, m.role, m.content) for m in conversation.messages.active()]


def texts(conversation: Conversation) -> list[str | None]:
    return [content for _, _, content in active(conversation)]


def scripted(*replies: str | ScriptedTurn) -> ScriptedChatClient:
    return ScriptedChatClient(list(replies))


@pytest.fixture
def two_turns() -> Conversation:
    made = make.conversation(make.user(), "versions")
    make.run_turn(made, "first question", scripted("first answer"))
    make.run_turn(made, "second question", scripted("second answer"))
    return made


def every_path_is_strict(conversation: Conversation) -> None:
    for path in versions.paths(conversation):
        values = [
            agent.ChatMessage(role=m.role, content=m.content)  # type: ignore[arg-type]
            for m in path.messages
        ]
        assert history.validate(values) == [], path.label


def test_edit_and_resend_keeps_the_earlier_continuation(two_turns: Conversation) -> None:
    client = scripted("edited answer")
    run = make.run_turn(two_turns, "second question, better", client, version_from=2)

    assert run.status == RunStatus.COMPLETED
    assert texts(two_turns) == [
        "first question",
        "first answer",
        "second question, better",
        "edited answer",
    ]
    (archived,) = Version.objects.filter(conversation=two_turns)
    assert (archived.index, archived.number, archived.parent) == (2, 1, None)
    assert [m.content for m in archived.messages.order_by("index")] == [
        "second question",
        "second answer",
    ]
    assert versions.points(two_turns) == {2: versions.Point(2, 2, 2)}
    # The model saw the active path only: the first turn and the edited question.
    sent = [m["content"] for m in client.requests[0]["messages"]]
    assert sent == ["first question", "first answer", "second question, better"]
    every_path_is_strict(two_turns)
    assert two_turns.title == "versions"


def test_regenerate_sends_the_same_question_again(two_turns: Conversation) -> None:
    make.run_turn(two_turns, None, scripted("another answer"), version_from=2)

    assert texts(two_turns)[2:] == ["second question", "another answer"]
    assert versions.points(two_turns)[2] == versions.Point(2, 2, 2)
    archived = Version.objects.get(conversation=two_turns)
    assert archived.messages.filter(content="second answer").exists()


def test_retry_keeps_the_failed_attempt_as_an_earlier_version() -> None:
    made = make.conversation(make.user())
    failing = scripted(ScriptedTurn(text="half", error=ProviderHTTPError("boom", status_code=500)))
    failed = make.run_turn(made, "question", failing)
    assert failed.status == RunStatus.FAILED

    retried = make.run_turn(made, None, scripted("whole answer"), version_from=0)

    assert retried.status == RunStatus.COMPLETED
    assert texts(made) == ["question", "whole answer"]
    archived = Version.objects.get(conversation=made)
    assert archived.messages.get(role="user").run_id == failed.pk
    assert versions.switch(made, 0, 1)
    assert texts(made) == ["question", "half"]
    every_path_is_strict(made)


def test_switching_shows_a_version_and_everything_after_it(two_turns: Conversation) -> None:
    make.run_turn(two_turns, "new second", scripted("new answer"), version_from=2)
    make.run_turn(two_turns, "third on the new one", scripted("third answer"))

    assert versions.switch(two_turns, 2, 1)
    assert texts(two_turns) == [
        "first question",
        "first answer",
        "second question",
        "second answer",
    ]
    assert versions.points(two_turns) == {2: versions.Point(2, 1, 2)}

    assert versions.switch(two_turns, 2, 2)
    assert texts(two_turns)[2:] == [
        "new second",
        "new answer",
        "third on the new one",
        "third answer",
    ]
    assert not versions.switch(two_turns, 2, 2)  # already shown: nothing changes
    every_path_is_strict(two_turns)


def test_versions_inside_versions_move_with_their_path(two_turns: Conversation) -> None:
    make.run_turn(two_turns, None, scripted("second answer, again"), version_from=2)
    make.run_turn(two_turns, "first, edited", scripted("answer to the edit"), version_from=0)

    assert versions.points(two_turns) == {0: versions.Point(0, 2, 2)}
    assert versions.switch(two_turns, 0, 1)
    # Back on the first version: its own versions at message 2 are there again.
    assert versions.points(two_turns) == {
        0: versions.Point(0, 1, 2),
        2: versions.Point(2, 2, 2),
    }
    assert texts(two_turns)[3] == "second answer, again"
    assert versions.switch(two_turns, 2, 1)
    assert texts(two_turns)[3] == "second answer"
    assert len(versions.paths(two_turns)) == 3
    every_path_is_strict(two_turns)


def test_a_third_version_counts_on(two_turns: Conversation) -> None:
    make.run_turn(two_turns, None, scripted("b"), version_from=2)
    versions.switch(two_turns, 2, 1)
    make.run_turn(two_turns, None, scripted("c"), version_from=2)

    assert versions.points(two_turns)[2] == versions.Point(2, 3, 3)
    numbers = {
        v.number: v.messages.get(role="assistant").content
        for v in Version.objects.filter(conversation=two_turns)
    }
    assert numbers == {1: "second answer", 2: "b"}


@pytest.mark.parametrize(
    ("index", "content", "reason"),
    [
        (1, "text", "Message 1 is not a user message: only those can be edited."),
        (1, None, "Message 1 does not start a reply: regenerate from its question."),
        (9, "text", "There is no message 9 in this conversation."),
        (2, "", "the message is empty"),
    ],
)
def test_a_version_that_cannot_be_made_is_refused_and_changes_nothing(
    two_turns: Conversation, index: int, content: str | None, reason: str
) -> None:
    before = active(two_turns)
    with pytest.raises(runs.RunRefused) as refused:
        make.run_turn(two_turns, content, scripted("never"), version_from=index)
    assert reason.rstrip(".") in str(refused.value)
    assert active(two_turns) == before
    assert not Version.objects.exists()
    assert two_turns.runs.count() == 2


async def test_no_version_while_a_run_is_in_progress() -> None:
    made = await make.aconversation()
    slow = ScriptedChatClient(["slow answer"], delay=0.05)
    handle = await make.start_as_owner(made, "question", slow)
    with pytest.raises(runs.RunRefused, match="already in progress"):
        await make.start_as_owner(made, None, scripted("x"), version_from=0)
    assert not await Version.objects.aexists()
    await handle.task


def test_switching_refuses_unknown_versions_and_runs_in_progress(two_turns: Conversation) -> None:
    with pytest.raises(versions.VersionRefused, match="no version 2 at message 2"):
        versions.switch(two_turns, 2, 2)
    make.run_turn(two_turns, None, scripted("b"), version_from=2)
    with pytest.raises(versions.VersionRefused, match="no version 3 at message 2"):
        versions.switch(two_turns, 2, 3)
    run = two_turns.runs.create(created_by=two_turns.owner, status=RunStatus.IN_PROGRESS)
    with pytest.raises(versions.VersionRefused, match="run is in progress"):
        versions.switch(two_turns, 2, 1)
    run.delete()


def test_a_turn_without_a_question_regenerates_from_its_first_reply() -> None:
    """A fork that continues from a tool reply has no user message: its reply is the start."""
    made = make.conversation(make.user())
    call = agent.ToolCall(id="c1", name="get_current_time", arguments="{}")
    Message.objects.bulk_create(
        [
            Message(conversation=made, index=0, role="user", content="time?"),
            Message(conversation=made, index=1, role="assistant", tool_calls=[call.to_openai()]),
            Message(conversation=made, index=2, role="tool", tool_call_id="c1", content="noon"),
        ]
    )
    make.run_turn(made, None, scripted("It is noon."))
    make.run_turn(made, None, scripted("Noon, says the clock."), version_from=3)

    assert texts(made)[3:] == ["Noon, says the clock."]
    assert versions.points(made) == {3: versions.Point(3, 2, 2)}
    with pytest.raises(runs.RunRefused, match="only those can be edited"):
        make.run_turn(made, "text", scripted("x"), version_from=3)


def test_deleting_a_conversation_deletes_its_versions(two_turns: Conversation) -> None:
    make.run_turn(two_turns, None, scripted("b"), version_from=2)
    two_turns.delete()
    assert not Version.objects.exists()
    assert not Message.objects.exists()


async def test_stop_on_a_new_version_keeps_what_streamed_and_the_earlier_version() -> None:
    made = await make.aconversation()
    await (await make.start_as_owner(made, "question", scripted("first answer"))).task
    slow = ScriptedChatClient([" ".join(["word"] * 400)], delay=0.005)
    handle = await make.start_as_owner(made, None, slow, version_from=0)
    await asyncio.sleep(0.3)
    assert runs.cancel_run(handle.run.pk)
    with contextlib.suppress(asyncio.CancelledError):
        await handle.task
    await handle.run.arefresh_from_db()
    assert handle.run.status == RunStatus.CANCELLED
    history = await make.ahistory(made)
    assert history[0].content == "question" and (history[1].content or "").startswith("word")
    archived = await Version.objects.aget(conversation=made)
    assert await archived.messages.filter(content="first answer").aexists()
