"""Runs that waited for a person and were decided, made the way a server makes them: a strict
fake provider, `chat.runs.approvals.decide`, then `resume.claim_and_resume`. For the pages, the
admin and the exports that show decisions."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async as sync
from django.db.models import F

from chat.models import Conversation, ModelCall, ProviderProfile, Run, RunLease, ToolCall
from chat.runs import approvals, resume

from . import factories as make
from .openai_script import MODEL, text_turn, tool_turn
from .openai_server import FakeOpenAIServer

NOTE = '{"note": "ship it"}'
EDITED = '{"note": "ship it on Friday", "recipient": "ops"}'
REASON = "not before Friday"


def on_provider(
    fake: FakeOpenAIServer, owner: Any, *tools: str, title: str = "Approvals", **parameters: Any
) -> Conversation:
    """A conversation of `owner` with these tools, on the fake provider."""
    made = make.conversation(owner, title, enabled_tools=list(tools), **parameters)
    made.profile, _ = ProviderProfile.objects.get_or_create(
        name="fake",
        defaults={"base_url": fake.base_url, "model": MODEL, "available_to_everyone": True},
    )
    made.save()
    return made


async def waiting(made: Conversation, content: str = "hand it off") -> Run:
    """Start a run and wait until it waits for a decision (its task is then over)."""
    handle = await make.start_as_owner(made, content)
    run = await handle.task
    await run.arefresh_from_db()
    assert run.status == "requires_action", run.error
    return run


async def decided(user: Any, run: Run, verdict: str, **options: Any) -> Run:
    """Decide as `user` and, when the run goes on, resume it here as a server would."""
    outcome = await sync(approvals.decide)(user, run.pk, verdict, **options)
    if outcome.resumable:
        task = await resume.claim_and_resume(outcome.run)
        assert task is not None
        await task
    await run.arefresh_from_db()
    return run


async def _every_outcome(fake: FakeOpenAIServer, owner: Any, waited: float) -> Conversation:
    made = await sync(on_provider)(fake, owner, "handoff_note", "get_current_time", "search_cards")
    fake.enqueue(
        tool_turn(
            [
                ("a", "handoff_note", NOTE),
                ("t", "get_current_time", "{}"),
                ("b", "handoff_note", '{"note": "delete the branch"}'),
            ]
        ),
        text_turn("One handed off, one not."),
        tool_turn([("e", "handoff_note", NOTE)]),
        text_turn("Handed off to ops."),
    )
    run = await waiting(made)
    first, second = [c async for c in ToolCall.objects.filter(run=run, approval="waiting")]
    await _asked_earlier(run, waited)
    await decided(owner, run, "approve", call=first.pk)
    await decided(owner, run, "deny", call=second.pk, reason=REASON)
    run = await waiting(made, "and the note for Friday")
    edited = await ToolCall.objects.aget(run=run, approval="waiting")
    await decided(owner, run, "edit", call=edited.pk, arguments=EDITED)
    made.parameters = {**made.parameters, "tool_policies": {"search_cards": "never"}}
    await made.asave()
    fake.enqueue(tool_turn([("s", "search_cards", '{"query": "pills"}')]), text_turn("Refused."))
    await (await make.start_as_owner(made, "search the cards")).task
    return made


async def _asked_earlier(run: Run, seconds: float) -> None:
    """Make the wait last `seconds` without waiting them: the run so far moves back."""
    back = timedelta(seconds=seconds)
    await Run.objects.filter(pk=run.pk).aupdate(started_at=F("started_at") - back)
    await ModelCall.objects.filter(run=run).aupdate(started_at=F("started_at") - back)
    await RunLease.objects.filter(run=run).aupdate(
        acquired_at=F("acquired_at") - back, ended_at=F("ended_at") - back
    )
    await ToolCall.objects.filter(run=run, asked_at__isnull=False).aupdate(
        asked_at=F("asked_at") - back
    )


def conversation_with_decisions(
    fake: FakeOpenAIServer, owner: Any, *, waited: float = 0.0
) -> Conversation:
    """Three runs of `owner` on `fake`: the first's parallel turn has a call approved, one
    denied ("not before Friday") and a read-only one that ran without asking once they were
    decided; the second's call was edited and approved; the third's call of a tool whose
    policy is never was refused. `waited`: seconds the first run waited for its decisions."""
    made: Conversation = async_to_sync(_every_outcome)(fake, owner, waited)
    return made
