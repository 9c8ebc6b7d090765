"""Start, execute and cancel runs: where the agent core, the database and the listeners
(terminal, WebSocket group) meet.

A run is its own asyncio task, not tied to the caller: closing a browser tab does not stop it.
It is persisted per model turn and per tool call, never per token (see recorder).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from channels.db import database_sync_to_async as sync_to_async
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from chat import access, agent, transcripts
from chat.agent import events
from chat.agent.clients import ChatClient
from chat.agent.contracts import validation_text
from chat.agent.http import READ_PACING
from chat.agent.runtime import DebugRuntime
from chat.fragments import RunPublisher
from chat.models import Conversation, Message, Purpose, Run, RunStatus, title_from
from chat.transcripts import attachments as stored_files
from chat.transcripts import versions

from . import approvals, control, leases, liveness, mcp, tasks, titles
from .exceptions import RunRefused
from .providers import Endpoint, build_client, check_images, endpoint, profile_for_run
from .recorder import Recorder
from .scheduling import START_FIRST

if TYPE_CHECKING:
    from .resume import Resumption

logger = logging.getLogger(__name__)

Listener = Callable[[Run, events.RunEvent], Awaitable[None]]
# The events that show the reader the run has begun answering.
_SHOWN = (events.TextDelta, events.ReasoningDelta, events.ToolCallStarted)
# Seconds of continuous work after which a run gives the event loop back.
YIELD_AFTER = 0.001
IN_PROGRESS = "A run is already in progress in this conversation."
WAITING = (
    "A tool call above waits for your decision: approve or deny it (or press Stop) before "
    "sending more."
)
STOPPING = "The server is restarting: send your message again in a moment."


def default_parameters() -> agent.AgentParameters:
    """What a new conversation starts with: every built-in tool enabled."""
    return agent.AgentParameters(enabled_tools=tuple(agent.default_registry.built_in_names()))


@dataclass
class RunHandle:
    run: Run
    task: asyncio.Task[Run]


async def start_run(
    *,
    conversation: Conversation,
    user: Any,
    content: str | None,
    client: ChatClient | None = None,
    listeners: Sequence[Listener] = (),
    sender: str | None = None,
    version_from: int | None = None,
    attachments: Sequence[agent.Attachment] = (),
) -> RunHandle:
    """Validate, store the user message and a new Run, and start the run as its own task.

    With `content=None` the run continues the stored history (which must end with a user or a
    tool message). Raises RunRefused (`user` may not write here, another run is in progress, or
    the input is invalid); then nothing is written. `sender` is the channel of the socket the
    message came from: its composer is emptied by the run's first frame, the other tabs keep
    what they typed.

    With `version_from`, the run makes a new version from that message index on (see
    `transcripts.versions`): `content` replaces the user message there (edit and resend), or
    with `content=None` that message is sent again as it was (regenerate, retry); either keeps
    its files. `attachments` (stored values) are the files a new message carries.
    """
    # Asked here, not only by the callers: whoever starts a run, only who may write does.
    if refused := access.denied(user, access.Action.WRITE, conversation):
        raise RunRefused(refused)
    if tasks.stopping.is_set():
        raise RunRefused(STOPPING)
    if content is not None:
        # Checked first: an oversized or empty message costs no client, lock or query.
        check_message(content, attachments)
    started = START_FIRST.enter()
    # Titles are asked of the endpoint the run talks to, so only when it is the conversation's
    # own: a client given by the caller (a terminal's --base-url, a test) may point elsewhere.
    target: Endpoint | None = None
    try:
        if client is None:
            target = endpoint(await profile_for_run(conversation, user))
            model = conversation.agent_parameters().model
            check_images(endpoint(target.profile, model=model), attachments)
            client = build_client(target)
        try:
            run, request, user_message, next_index = await sync_to_async(_create_run)(
                conversation=conversation,
                user=user,
                content=content,
                client=client,
                version_from=version_from,
                attachments=tuple(attachments),
            )
        except RunRefused:
            await client.aclose()
            raise
    except BaseException:
        started()
        raise
    publisher = RunPublisher(
        run, user_message=user_message, sender=sender, new_version=version_from is not None
    )
    # A fresh context: a run started from an HTTP view must not inherit the request's thread
    # executor, which is gone once the response is sent.
    task = asyncio.create_task(
        execute_run(
            run,
            request,
            client,
            listeners=[*listeners, publisher],
            publisher=publisher,
            started=started,
            title_endpoint=target,
            next_index=next_index,
        ),
        context=contextvars.Context(),
    )
    tasks.RUNS.register(run.pk, task)
    # A task cancelled before its first step never ran its own finally.
    task.add_done_callback(lambda _: started())
    return RunHandle(run=run, task=task)


def check_message(content: str, attachments: Sequence[agent.Attachment] = ()) -> None:
    """RunRefused saying why, when a user message cannot be sent (empty, too long)."""
    try:
        agent.DebugRunRequest.model_validate(
            {"user_message": content, "attachments": tuple(attachments)},
            context=_message_limit(),
        )
    except ValueError as exc:
        raise RunRefused(validation_text(exc, unnamed=["user_message"])) from None


def _message_limit() -> dict[str, int]:
    """The validation context that carries the server's longest accepted message."""
    return {"max_message_chars": settings.AGENTLAB_MAX_MESSAGE_CHARS}


def cancel_run(run_id: int) -> bool:
    """Cancel a run executing in this process; False when it is not running here."""
    return tasks.RUNS.cancel(run_id)


def _create_run(
    *,
    conversation: Conversation,
    user: Any,
    content: str | None,
    client: ChatClient,
    version_from: int | None = None,
    attachments: tuple[agent.Attachment, ...] = (),
) -> tuple[Run, agent.DebugRunRequest, Message | None, int]:
    """The new run (its conversation attached), the request to execute, the user message row,
    and the index the run's first reply takes."""
    limit = _message_limit()
    created: list[int] = []
    try:
        with transaction.atomic():
            conversation = Conversation.objects.select_for_update().get(pk=conversation.pk)
            if conversation.runs.waiting().exists():
                raise RunRefused(WAITING)
            try:
                parameters = approvals.for_run(conversation, conversation.agent_parameters())
            except ValueError as exc:
                raise RunRefused(
                    f"The agent settings of this conversation are invalid: {validation_text(exc)}"
                ) from None

            def load() -> tuple[list[Message], agent.DebugRunRequest]:
                rows = list(conversation.messages.active())
                data = {
                    "parameters": parameters,
                    "history": tuple(transcripts.to_chat_messages(rows)),
                    "attachments": attachments if content is not None else (),
                    "user_message": content,
                }
                try:
                    request = agent.DebugRunRequest.model_validate(data, context=limit)
                    return rows, stored_files.request_with_contents(request)
                except ValueError as exc:
                    raise RunRefused(validation_text(exc, unnamed=["user_message"])) from None

            if version_from is None:
                rows, request = load()  # invalid input is refused before anything else
            reload = version_from is not None
            for active in conversation.runs.in_progress():
                if not tasks.RUNS.is_dead(active):
                    raise RunRefused(IN_PROGRESS)
                liveness.interrupt(active)
                reload = True  # the repair answered the run's dangling tool calls
            if version_from is not None:
                active_rows = list(conversation.messages.active())
                content, attachments = _new_version(
                    conversation, active_rows, version_from, content
                )
            if reload:
                rows, request = load()
            now = timezone.now()
            run = Run.objects.create(
                conversation=conversation,
                created_by=user,
                worker=tasks.WORKER_ID,
                heartbeat_at=now,
                lease_expires_at=now + tasks.lease(),
                model=parameters.model or client.model,
                parameters=parameters.to_json(),
            )
            leases.open_lease(run)
            tasks.RUNS.starting.add(run.pk)
            created.append(run.pk)
            user_message = None
            next_index = rows[-1].index + 1 if rows else 0
            if content is not None:
                (user_message,) = transcripts.append_messages(
                    conversation,
                    [agent.ChatMessage(role="user", content=content, attachments=attachments)],
                    run=run,
                    start=next_index,
                )
                next_index += 1
                if not conversation.title and version_from is None:
                    conversation.title = title_from(content or attachments[0].name)
            conversation.save(update_fields=["title", "updated_at"])
    except BaseException as exc:
        # Rolled back: the run's id was never committed (and SQLite may hand it out again).
        tasks.RUNS.starting.difference_update(created)
        if isinstance(exc, IntegrityError):
            raise RunRefused(IN_PROGRESS) from None
        raise
    return run, request, user_message, next_index


def _new_version(
    conversation: Conversation, rows: list[Message], index: int, content: str | None
) -> tuple[str | None, tuple[agent.Attachment, ...]]:
    """Archive the active path from `index` on; the new version's user message and its files."""
    try:
        start = versions.start_of(rows, index, edit=content is not None)
    except versions.VersionRefused as exc:
        raise RunRefused(str(exc)) from None
    versions.archive_from(conversation, index)
    kept = transcripts.to_chat_message(start).attachments if start.role == "user" else ()
    if content is None and start.role == Message.Role.USER:
        return start.content or "", kept
    return content, kept if content is not None else ()


async def execute_run(
    run: Run,
    request: agent.DebugRunRequest,
    client: ChatClient,
    *,
    listeners: Sequence[Listener] = (),
    publisher: RunPublisher | None = None,
    started: Callable[[], None] | None = None,
    title_endpoint: Endpoint | None = None,
    runtime: DebugRuntime | None = None,
    next_index: int | None = None,
    resumption: Resumption | None = None,
) -> Run:
    """Drive DebugRuntime for one run, persisting as it goes and telling every listener.

    While it runs, it answers control messages (cancel, catch-up) on the conversation's
    control group, so a socket in any process can stop it or catch up with it. `started` is
    called once the run has shown something (see StartFirst); start_run also calls it when
    the task ends. With `title_endpoint`, a completed run has that endpoint propose its
    conversation's title afterwards, in a task of its own (see `titles`). A `runtime` of the
    caller's brings its own tools (an evaluation's replay): MCP tools are then not prepared.
    `next_index` is the index of the run's first new message, when the caller knows it.

    With `resumption`, a run another process began goes on from its transcript. While this
    process stops, the run pauses at its next step boundary (before a model request, or after
    a model turn whose tool calls have not started) and lets go of its lease, so that another
    process resumes it; one still mid-step when the shutdown's grace ends saves what streamed
    and lets go the same way.
    """
    recorder = Recorder(run, next_index=next_index)
    if resumption is not None:
        await sync_to_async(recorder.resume_from)(resumption)
    if publisher is not None:
        publisher.recorded = recorder.turn
        # This task's provider reads wait for the publisher's next frame (set in the run's own
        # context: nothing else is paced).
        READ_PACING.set(publisher.read_due)

    async def tell(event: events.RunEvent) -> None:
        for listener in listeners:
            try:
                await listener(run, event)
            except Exception:
                logger.exception("run %s: a listener failed on %s", run.pk, type(event).__name__)

    release = tasks.RUNS.hold(run.pk, run.conversation_id, control.handler(publisher))
    try:
        await tell(events.RunStarted())
        if runtime is None:  # the run's own tools: the built-in ones and its MCP tools
            prepared = await mcp.hub.prepare(request)
            request, registry = prepared.request, prepared.registry
            runtime = DebugRuntime(client=client, registry=registry)
            if not_offered := request.parameters.unavailable_tools(registry):
                logger.info("run %s: chosen tools not offered: %s", run.pk, ", ".join(not_offered))
        resumed = time.monotonic()
        point = None if resumption is None else resumption.resume(runtime.registry)
        first_step = 1 if point is None else point.step
        chat = run.conversation.purpose == Purpose.CHAT  # an evaluation's runs do not resume
        stream = runtime.run(request, resume=point)
        try:
            async for event in stream:
                await recorder.record(event)
                await tell(event)
                if tasks.stopping.is_set() and chat and _boundary(event, first_step):
                    await sync_to_async(recorder.pause)()
                    await asyncio.shield(sync_to_async(leases.release)(run.pk))
                    logger.warning("run %s paused for the shutdown, to resume elsewhere", run.pk)
                    return run
                if started is not None and isinstance(event, _SHOWN):
                    started()
                    started = None
                if started is None and START_FIRST.starting:
                    await START_FIRST.give_way()
                    resumed = time.monotonic()
                elif time.monotonic() - resumed > YIELD_AFTER:
                    # A burst already buffered is parsed without a real await: let the sockets
                    # and the other runs have the loop now and then.
                    await asyncio.sleep(0)
                    resumed = time.monotonic()
        finally:
            await stream.aclose()
    except asyncio.CancelledError:
        if run.pk in tasks.RUNS.lost:  # another process took it over: it writes from now on
            tasks.RUNS.lost.discard(run.pk)
            raise
        if tasks.stopping.is_set() and run.conversation.purpose == Purpose.CHAT:
            # Mid-step when the shutdown's grace ended: what streamed is saved, and another
            # process (or this one, restarted) resumes the run from there.
            async def suspend() -> None:
                await sync_to_async(recorder.suspend)()
                await sync_to_async(leases.release)(run.pk)

            await asyncio.shield(suspend())
            raise
        status, reason = liveness.stopped()

        async def wind_up() -> None:
            await tell(await recorder.stop(status, reason))

        # Shielded: a second cancel (Stop twice, a shutdown) must not cut the wind-up short.
        await asyncio.shield(wind_up())
        raise
    except Exception as exc:
        if not await Run.objects.filter(pk=run.pk).aexists():
            logger.info("run %s was deleted while it ran; it stops here", run.pk)
            return run
        logger.exception("run %s failed with an internal error", run.pk)
        finished = await recorder.stop(RunStatus.FAILED, f"Internal error: {type(exc).__name__}")
        await tell(finished)
    finally:
        release()
        if publisher is not None:
            publisher.close()
        await client.aclose()
    if title_endpoint is not None:
        titles.propose_later(run, title_endpoint)
    return run


def _boundary(event: events.RunEvent, first_step: int) -> bool:
    """A point where a run may pause with nothing in flight: before a model request (after
    its first, which a resumed run owes), or after a model turn whose tool calls have not
    started (they start after this event)."""
    if isinstance(event, events.StepStarted):
        return event.step > first_step
    return isinstance(event, events.TurnEnd) and bool(event.message.tool_calls)
