"""Runs that outlive their process: leases, claims, and resuming a run from its transcript.

A process holds each run it executes by a lease on the run row (`tasks.TaskKind`): renewed by
the heartbeat, released at once when the process stops. Every server process sweeps now and
then for runs whose lease has expired (or was released) and claims them, one atomic update that
exactly one claimer wins; the winner resumes the run where its transcript says it was.

The transcript is the step log: finished model turns and finished tool calls are never done
again. The model turn that was streaming is requested again (its checkpointed text stays on the
page until the new text replaces it); a tool call whose outcome is unknown is run again only when
its tool says that is safe (`ToolRegistry.repeatable`), else it is answered "not repeated".
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from channels.db import database_sync_to_async as sync_to_async
from django.conf import settings
from django.db import DatabaseError, transaction

from chat import agent, transcripts
from chat.agent.approvals import denial
from chat.agent.clients import ChatClient
from chat.agent.events import ToolResult
from chat.agent.runtime import Resume
from chat.models import (
    Approval,
    LeaseEnd,
    Message,
    Purpose,
    Run,
    RunStatus,
    ToolCall,
    ToolCallStatus,
)
from chat.resumed import ResumedPublisher
from chat.transcripts import attachments as stored_files

from . import approvals, leases, liveness
from .exceptions import RunRefused
from .lifecycle import Listener, execute_run
from .providers import build_client, endpoint, profile_for_run
from .recorder import Recorder
from .tasks import RUNS, WORKER_ID, stopping

logger = logging.getLogger(__name__)

DENIED = (Approval.DENIED, Approval.EXPIRED)
NOT_REPEATED = "Interrupted: not repeated, its outcome is unknown"
"""The reply to a call in flight when its process died, of a tool not safe to run twice."""


def too_many_resumes(times: int) -> str:
    return (
        f"Stopped: the run was resumed {times} times and its process stopped each time "
        f"(AGENTLAB_MAX_RESUMES is {settings.AGENTLAB_MAX_RESUMES})."
    )


def claimable() -> list[Run]:
    """In-progress runs of conversations whose process no longer holds them (an evaluation's
    runs are its own: an evaluation is taken over as a whole)."""
    rows = Run.objects.in_progress().filter(conversation__purpose=Purpose.CHAT)
    return [row for row in rows if RUNS.is_dead(row)]


@dataclass
class Resumption:
    """What a claimed run goes on from: its request (history and its own parameters), the
    step it is in, the draft of the reply that was streaming, and the pending round of tool
    calls with the results already known."""

    run: Run
    request: agent.DebugRunRequest
    step: int
    next_index: int
    draft: Message | None = None
    round_message: Message | None = None
    calls: list[ToolCall] = field(default_factory=list)

    def resume(self, registry: agent.ToolRegistry) -> Resume:
        """The runtime's resume point, deciding which unfinished calls run again: those a
        person approved run, those denied are answered so."""
        answered: dict[str, ToolResult] = {}
        approved = set()
        for row in self.calls:
            call = agent.ToolCall(id=row.call_id, name=row.name, arguments=row.run_arguments)
            if row.approval in approvals.APPROVED:
                approved.add(row.call_id)
            if row.status == ToolCallStatus.IN_PROGRESS and row.approval in DENIED:
                answered[row.call_id] = denial(call, row.decision_reason)
            elif row.status != ToolCallStatus.IN_PROGRESS:
                answered[row.call_id] = ToolResult(
                    tool_call=call,
                    content=row.result,
                    status="completed" if row.status == ToolCallStatus.COMPLETED else "failed",
                    error=row.error or None,
                    duration=row.duration or 0.0,
                    source=row.server,
                    raw=row.raw_result,
                    failure=row.failure,
                )
            elif row.started_at is not None and not registry.repeatable(row.name):
                answered[row.call_id] = ToolResult(
                    tool_call=call,
                    content=json.dumps({"error": f"{NOT_REPEATED}: {row.name}"}),
                    status="failed",
                    error=NOT_REPEATED,
                    failure="interrupted",
                )
        return Resume(step=self.step, answered=answered, approved=frozenset(approved))


def resumption(run: Run) -> Resumption:
    """Read where a claimed run was from the stored transcript."""
    conversation = run.conversation
    rows = list(conversation.messages.active())
    next_index = rows[-1].index + 1 if rows else 0
    draft = None
    last = rows[-1] if rows else None
    if (
        last is not None
        and last.run_id == run.pk
        and last.role == Message.Role.ASSISTANT
        and not last.tool_calls
    ):
        draft = rows.pop()  # the reply that was streaming: requested again
        next_index = draft.index
    step = run.steps + 1
    round_message = None
    calls: list[ToolCall] = []
    if rows and rows[-1].run_id == run.pk and rows[-1].tool_calls:
        round_message = rows[-1]  # its round of tool calls did not finish
        step = run.steps
        calls = list(ToolCall.objects.filter(run=run, message=round_message).order_by("position"))
    parameters = agent.AgentParameters.from_stored(run.parameters)  # its MCP tools too
    request = agent.DebugRunRequest.model_validate(
        {
            "parameters": parameters,
            "history": transcripts.to_chat_messages(rows),
            "user_message": None,
        },
        context={"resuming": True},
    )
    request = stored_files.request_with_contents(request)
    return Resumption(run, request, step, next_index, draft, round_message, calls)


@transaction.atomic
def give_up(run: Run) -> None:
    """End a run resumed too often: failed, saying so, its history repaired."""
    if liveness.end(run, RunStatus.FAILED, too_many_resumes(run.resumes - 1), held_by=WORKER_ID):
        leases.close_lease(run.pk, LeaseEnd.FINISHED)


async def resume_run(
    run: Run, *, client: ChatClient | None = None, listeners: Sequence[Listener] = ()
) -> asyncio.Task[Run] | None:
    """Resume a run this process has just claimed, as a task of its own; None when it was
    resumed too often (then it fails). `client` and `listeners` as for `execute_resumed`."""
    if run.resumes > settings.AGENTLAB_MAX_RESUMES:
        await sync_to_async(give_up)(run)
        RUNS.starting.discard(run.pk)
        logger.warning("run %s: resumed too often, failed", run.pk)
        return None
    point = await sync_to_async(resumption)(run)
    if stopping.is_set():  # the process began to stop meanwhile: another resumes it at once
        RUNS.starting.discard(run.pk)
        await sync_to_async(leases.release)(run.pk)
        return None
    # A fresh context, as for any run; not a background task: a stopping process pauses it.
    task = asyncio.create_task(
        execute_resumed(point, client=client, listeners=listeners), context=contextvars.Context()
    )
    RUNS.register(run.pk, task)
    return task


async def execute_resumed(
    point: Resumption, *, client: ChatClient | None = None, listeners: Sequence[Listener] = ()
) -> Run:
    """Go on with a run this process claimed (see `resume`): its conversation's endpoint, a
    publisher whose first frame shows the conversation as stored, the reply going on.

    A terminal that decided the run's calls follows it here: its `client` (the endpoint it
    started the run on) and its `listeners` (what prints the reply)."""
    run = point.run
    try:
        if client is None:
            target = endpoint(await profile_for_run(run.conversation, run.created_by))
            client = build_client(target)
    except RunRefused as exc:
        recorder = Recorder(run)
        await sync_to_async(recorder.resume_from)(point)
        await recorder.stop(RunStatus.FAILED, f"Not resumed: {exc}")
        RUNS.starting.discard(run.pk)
        return run
    publisher = ResumedPublisher(run, point.draft)
    return await execute_run(
        run,
        point.request,
        client,
        listeners=[*listeners, publisher],
        publisher=publisher,
        next_index=point.next_index,
        resumption=point,
    )


async def sweep() -> list[asyncio.Task[Run]]:
    """Claim and resume every run whose process no longer holds it."""
    if stopping.is_set():
        return []
    started = []
    for row in await sync_to_async(claimable)():
        if stopping.is_set():
            break
        # Shielded: a shutdown cancels the sweeper, and a run it claimed must still be resumed
        # or let go (`resume_run`), not left held by a process that is gone.
        task = await asyncio.shield(claim_and_resume(row))
        if task is not None:
            started.append(task)
    return started


async def expire_waiting() -> list[asyncio.Task[Run]]:
    """Deny the calls of runs that waited past AGENTLAB_APPROVAL_TIMEOUT, and resume them
    (the model reads why)."""
    started = []
    due: list[Run] = await sync_to_async(lambda: list(approvals.due()))()
    for row in due:
        if stopping.is_set():
            break
        decided = await sync_to_async(approvals.expire)(row)
        if decided is not None and decided.resumable:
            task = await asyncio.shield(claim_and_resume(decided.run))
            if task is not None:
                started.append(task)
    return started


async def claim_and_resume(
    row: Run, *, client: ChatClient | None = None, listeners: Sequence[Listener] = ()
) -> asyncio.Task[Run] | None:
    """Claim a run no process holds and resume it here; None when another process claimed
    it first (or it was resumed too often). `client` and `listeners` as for `execute_resumed`."""
    task = None
    if await sync_to_async(leases.claim)(row):
        run = await Run.objects.select_related("conversation", "created_by").aget(pk=row.pk)
        task = await resume_run(run, client=client, listeners=listeners)
        # A run whose process is gone is news for an operator; one a person decided on is not.
        level = logging.WARNING if run.resumes > row.resumes else logging.INFO
        if task is not None:
            logger.log(level, "run %s of conversation %s resumed here", run.pk, run.conversation_id)
    if task is None and client is not None:
        await client.aclose()
    return task


async def sweep_forever(*sweeps: Callable[[], Awaitable[object]]) -> None:
    """A server process's sweeper (of runs, and of whatever else `sweeps` take over): at
    start, then every AGENTLAB_CLAIM_SECONDS."""
    while not stopping.is_set():
        for one in (sweep, expire_waiting, *sweeps):
            try:
                await one()
            except DatabaseError as exc:
                logger.warning("not swept: %s", exc)
            except Exception:
                logger.exception("not swept")
        await asyncio.sleep(settings.AGENTLAB_CLAIM_SECONDS)
