"""Start, execute and cancel runs: the one module that joins the agent core, the database and
the listeners (terminal, WebSocket group).

A run is its own asyncio task, not tied to the caller: closing a browser tab does not stop it.
It is persisted per model turn and per tool call, never per token.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from channels.db import database_sync_to_async as sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from chat import agent, transcripts
from chat.agent import events
from chat.agent.clients import ChatClient, OpenAICompatibleChatClient
from chat.agent.runtime import DebugRuntime
from chat.agent.scripted import ScriptedChatClient
from chat.agent.wire import WireFormat
from chat.fragments import RunPublisher
from chat.models import (
    Conversation,
    Message,
    ModelCall,
    ProviderProfile,
    Run,
    RunStatus,
    ToolCall,
    ToolCallStatus,
)

logger = logging.getLogger(__name__)

Listener = Callable[[Run, events.RunEvent], Awaitable[None]]
_tasks: dict[int, asyncio.Task[Run]] = {}

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
HEARTBEAT_INTERVAL = 10.0
# A run whose process has not shown a sign of life for this long is taken as dead.
STALE_AFTER = timedelta(seconds=60)
# The events that show the reader the run has begun answering.
_SHOWN = (events.TextDelta, events.ReasoningDelta, events.ToolCallStarted)
# Seconds of continuous work after which a run gives the event loop back.
YIELD_AFTER = 0.001
INTERRUPTED = "Interrupted: the server process stopped during the run."


class RunRefused(Exception):
    """The run was not started; nothing was written. The text says why, for the user."""


def default_parameters() -> agent.AgentParameters:
    """What a new conversation starts with: every registered tool enabled."""
    return agent.AgentParameters(enabled_tools=tuple(agent.default_registry.names()))


def build_client(
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    model: str | None = None,
    profile: ProviderProfile | None = None,
) -> ChatClient:
    """A profile's endpoint, else the configured one, else the scripted model."""
    if profile is not None:
        return OpenAICompatibleChatClient(
            base_url=base_url or profile.base_url,
            api_key=api_key
            or (os.environ.get(profile.api_key_env) if profile.api_key_env else None)
            or None,
            model=model or profile.model,
            wire=wire_format(profile),
        )
    base_url = base_url or settings.OPENAI_BASE_URL
    if not base_url:
        return ScriptedChatClient(delay=settings.AGENTLAB_SCRIPTED_DELAY)
    model = model or settings.AGENTLAB_MODEL
    if not model:
        raise RunRefused("Set AGENTLAB_MODEL (or pass a model) to use an OpenAI-compatible server.")
    return OpenAICompatibleChatClient(
        base_url=base_url,
        api_key=api_key or settings.OPENAI_API_KEY or None,
        model=model,
        wire=WireFormat(empty_content=settings.AGENTLAB_TOOL_CALL_CONTENT),
    )


def wire_format(profile: ProviderProfile) -> WireFormat:
    return WireFormat(
        empty_content=profile.tool_call_content,  # type: ignore[arg-type]
        tool_call_ids=profile.tool_call_ids,  # type: ignore[arg-type]
        reasoning_field=profile.reasoning_field,  # type: ignore[arg-type]
        parallel_tool_calls=profile.parallel_tool_calls,
    )


class StartFirst:
    """Runs of this process that have shown nothing yet go before runs that already stream.

    Under a burst of messages, starting a run (its transaction, its first frame, the provider
    request) queued behind every stream already going, and the last conversation of the burst
    waited for all of them. While any run is starting, a streaming run gives way for up to
    HOLD seconds at a time instead of one loop iteration: everyone sees the reply begin, the
    replies already streaming finish a little later.
    """

    HOLD = 0.1

    def __init__(self) -> None:
        self.starting = 0
        self._clear: asyncio.Future[None] | None = None

    def enter(self) -> Callable[[], None]:
        """Count one starting run; call the returned function (as often as you like) to leave."""
        self.starting += 1
        left = False

        def leave() -> None:
            nonlocal left
            if not left:
                left = True
                self.starting -= 1
                if not self.starting:
                    self._release()

        return leave

    def _release(self) -> None:
        clear, self._clear = self._clear, None
        if clear is not None and not clear.done() and not clear.get_loop().is_closed():
            clear.set_result(None)

    async def give_way(self) -> None:
        """Wait until no run is starting, or for HOLD seconds at most."""
        if not self.starting:
            return
        loop = asyncio.get_running_loop()
        if self._clear is None or self._clear.done() or self._clear.get_loop() is not loop:
            self._clear = loop.create_future()
        await asyncio.wait([self._clear], timeout=self.HOLD)


START_FIRST = StartFirst()


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
) -> RunHandle:
    """Validate, store the user message and a new Run, and start the run as its own task.

    With `content=None` the run continues the stored history (which must end with a user or a
    tool message). Raises RunRefused (another run is in progress, or the input is invalid);
    then nothing is written. `sender` is the channel of the socket the message came from: its
    composer is emptied by the run's first frame, the other tabs keep what they typed.
    """
    started = START_FIRST.enter()
    try:
        if client is None:
            profile = None
            if conversation.profile_id is not None:
                profile = await ProviderProfile.objects.filter(pk=conversation.profile_id).afirst()
            client = build_client(profile=profile)
        try:
            run, request, user_message = await sync_to_async(_create_run)(
                conversation=conversation, user=user, content=content, client=client
            )
        except RunRefused:
            await client.aclose()
            raise
    except BaseException:
        started()
        raise
    publisher = RunPublisher(run, user_message=user_message, sender=sender)
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
        ),
        context=contextvars.Context(),
    )
    _tasks[run.pk] = task

    def done(_: asyncio.Task[Run]) -> None:
        _tasks.pop(run.pk, None)
        started()  # a task cancelled before its first step never ran its own finally

    task.add_done_callback(done)
    return RunHandle(run=run, task=task)


def cancel_run(run_id: int) -> bool:
    """Cancel a run executing in this process; False when it is not running here."""
    task = _tasks.get(run_id)
    if task is None or task.done():
        return False
    task.cancel()
    return True


def _create_run(
    *, conversation: Conversation, user: Any, content: str | None, client: ChatClient
) -> tuple[Run, agent.DebugRunRequest, Message | None]:
    """The new run (its conversation attached), the request to execute, the user message row."""
    if content is not None and len(content) > settings.AGENTLAB_MAX_MESSAGE_CHARS:
        raise RunRefused(
            f"The message is too long: {len(content):,} characters "
            f"(the limit is {settings.AGENTLAB_MAX_MESSAGE_CHARS:,})."
        )
    try:
        with transaction.atomic():
            conversation = Conversation.objects.select_for_update().get(pk=conversation.pk)
            try:
                parameters = conversation.agent_parameters()
            except ValueError as exc:
                raise RunRefused(
                    f"The agent settings of this conversation are invalid: {validation_text(exc)}"
                ) from None

            def load() -> tuple[list[Message], agent.DebugRunRequest]:
                rows = list(conversation.messages.order_by("index"))
                try:
                    return rows, agent.DebugRunRequest(
                        parameters=parameters,
                        history=tuple(transcripts.to_chat_messages(rows)),
                        user_message=content,
                    )
                except ValueError as exc:
                    raise RunRefused(validation_text(exc)) from None

            rows, request = load()
            for active in conversation.runs.filter(status=RunStatus.IN_PROGRESS):
                if not _is_dead(active):
                    raise RunRefused("A run is already in progress in this conversation.")
                interrupt(active)
                rows, request = load()  # the repair answered the run's dangling tool calls
            run = Run.objects.create(
                conversation=conversation,
                created_by=user,
                worker=WORKER_ID,
                heartbeat_at=timezone.now(),
                model=parameters.model or client.model,
                parameters=parameters.to_json(),
            )
            user_message = None
            if content is not None:
                (user_message,) = transcripts.append_messages(
                    conversation,
                    [agent.ChatMessage(role="user", content=content)],
                    run=run,
                    start=rows[-1].index + 1 if rows else 0,
                )
                if not conversation.title:
                    conversation.title = _title_from(content)
            conversation.save(update_fields=["title", "updated_at"])
    except IntegrityError:
        raise RunRefused("A run is already in progress in this conversation.") from None
    return run, request, user_message


def _title_from(content: str) -> str:
    line = " ".join(content.split())
    return line if len(line) <= 60 else line[:59].rstrip() + "…"


def validation_text(exc: ValueError) -> str:
    """A pydantic ValidationError as one readable line: "field: what is wrong; ..."."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    parts = []
    for error in errors():
        message = str(error["msg"]).removeprefix("Value error, ")
        where = ".".join(str(part) for part in error["loc"])
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


async def execute_run(
    run: Run,
    request: agent.DebugRunRequest,
    client: ChatClient,
    *,
    listeners: Sequence[Listener] = (),
    publisher: RunPublisher | None = None,
    started: Callable[[], None] | None = None,
) -> Run:
    """Drive DebugRuntime for one run, persisting as it goes and telling every listener.

    While it runs, it answers control messages (cancel, catch-up) on the conversation's
    control group, so a socket in any process can stop it or catch up with it. `started` is
    called once the run has shown something (see StartFirst); start_run also calls it when
    the task ends.
    """
    recorder = _Recorder(run)
    runtime = DebugRuntime(client=client)

    async def tell(event: events.RunEvent) -> None:
        for listener in listeners:
            try:
                await listener(run, event)
            except Exception:
                logger.exception("run %s: a listener failed on %s", run.pk, type(event).__name__)

    heartbeat = asyncio.create_task(_beat(run.pk))
    control = asyncio.create_task(_control(run, asyncio.current_task(), publisher))
    try:
        await tell(events.RunStarted())
        resumed = time.monotonic()
        async for event in runtime.run(request):
            await recorder.record(event)
            await tell(event)
            if started is not None and isinstance(event, _SHOWN):
                started()
                started = None
            if started is None and START_FIRST.starting:
                await START_FIRST.give_way()
                resumed = time.monotonic()
            elif time.monotonic() - resumed > YIELD_AFTER:
                # A burst already buffered is parsed without a real await: let the sockets and
                # the other runs have the loop now and then.
                await asyncio.sleep(0)
                resumed = time.monotonic()
    except asyncio.CancelledError:

        async def wind_up() -> None:
            await tell(await recorder.stop(RunStatus.CANCELLED, "Cancelled by the user."))

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
        heartbeat.cancel()
        control.cancel()
        await client.aclose()
    return run


def control_group(conversation_id: int) -> str:
    """The group a run in progress listens on for cancel and catch-up requests."""
    return f"conversation-control.{conversation_id}"


async def request_cancel(conversation_id: int) -> None:
    """Ask the run in progress in a conversation to stop, whichever process executes it."""
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(control_group(conversation_id), {"type": "run.cancel"})


async def request_catch_up(conversation_id: int, reply_channel: str) -> None:
    """Ask the run in progress to send its live state to one socket."""
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(
            control_group(conversation_id), {"type": "run.sync", "reply_channel": reply_channel}
        )


async def _control(
    run: Run, task: asyncio.Task[Any] | None, publisher: RunPublisher | None
) -> None:
    layer = get_channel_layer()
    if layer is None or task is None:
        return
    # The default prefix: channels_redis reads all of a process's channels of one prefix with
    # a single blocking pop, so a prefix of its own would hold that read for the whole run and
    # starve the sockets on this process.
    channel = await layer.new_channel()
    group = control_group(run.conversation_id)
    await layer.group_add(group, channel)
    try:
        while True:
            message = await layer.receive(channel)
            if message.get("type") == "run.cancel" and not task.cancelling():
                task.cancel()
            elif message.get("type") == "run.sync" and publisher is not None:
                await publisher.send_snapshot(message["reply_channel"])
    finally:
        await asyncio.shield(layer.group_discard(group, channel))


async def _beat(run_id: int) -> None:
    """Tell other processes this run is alive, so they do not take it for a crashed one."""
    while True:
        await asyncio.sleep(HEARTBEAT_INTERVAL)
        await Run.objects.filter(pk=run_id, status=RunStatus.IN_PROGRESS).aupdate(
            heartbeat_at=timezone.now()
        )


def _is_dead(run: Run) -> bool:
    """Whether the process executing an in-progress run is gone."""
    if run.pk in _tasks or run.worker == WORKER_ID:
        return run.pk not in _tasks
    host, _, rest = run.worker.partition(":")
    pid = rest.partition(":")[0]
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
    heartbeat = run.heartbeat_at or run.started_at
    return heartbeat < timezone.now() - STALE_AFTER


@transaction.atomic
def interrupt(run: Run) -> None:
    """Mark a run whose process died as interrupted and repair its conversation's history."""
    claimed = Run.objects.filter(pk=run.pk, status=RunStatus.IN_PROGRESS).update(
        status=RunStatus.INTERRUPTED
    )
    if not claimed:
        return  # another process got there first
    run.status = RunStatus.INTERRUPTED
    run.error = INTERRUPTED
    run.finished_at = timezone.now()
    run.save(update_fields=["status", "error", "finished_at"])
    run.tool_calls.filter(status=ToolCallStatus.IN_PROGRESS).update(
        status=ToolCallStatus.FAILED, error=INTERRUPTED, finished_at=timezone.now()
    )
    transcripts.repair_conversation(run.conversation, reason=INTERRUPTED.rstrip("."), run=run)


def recover_interrupted_runs() -> list[Run]:
    """Interrupt every in-progress run whose process is gone; returns them."""
    recovered = []
    for run in Run.objects.filter(status=RunStatus.IN_PROGRESS).select_related("conversation"):
        if _is_dead(run):
            interrupt(run)
            recovered.append(run)
            logger.warning("run %s of conversation %s interrupted", run.pk, run.conversation_id)
    return recovered


@dataclass
class _Step:
    number: int
    started: float
    request: dict[str, Any] = field(default_factory=dict)
    status_code: int | None = None
    attempts: int = 1
    first_token: float | None = None
    usage: events.Usage = field(default_factory=events.Usage)
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    url: str = ""
    raw: events.RawStream = ()
    preflight: list[str] = field(default_factory=list)
    model_call_saved: bool = False
    message: Message | None = None
    calls: list[agent.ToolCall] = field(default_factory=list)
    results: dict[str, events.ToolResult] = field(default_factory=dict)


class _Recorder:
    """Turns run events into rows: one write per model turn, per tool call and at the end."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.started = time.monotonic()
        self.first_token: float | None = None
        self.step: _Step | None = None
        self.usage = events.Usage()

    async def record(self, event: events.RunEvent) -> None:
        step = self.step
        match event:
            case events.StepStarted(number):
                self.step = _Step(number=number, started=time.monotonic())
            case events.PreflightRepaired(_, violations) if step:
                step.preflight = list(violations)
            case events.ModelRequestSent(body, status_code, attempts, url) if step:
                step.request, step.status_code, step.attempts = body, status_code, attempts
                step.url = url
            case events.TextDelta(text) if step:
                self._first_token(step)
                step.text.append(text)
            case events.ReasoningDelta(text) if step:
                self._first_token(step)
                step.reasoning.append(text)
            case events.Usage() if step:
                self.usage += event - step.usage
                step.usage = event
            case events.ModelCallFailed() if step:
                step.request = event.request_body or step.request
                step.status_code, step.attempts = event.status_code, event.attempts
                step.raw = event.raw
                await sync_to_async(self._save_model_call)(step, "", event.message)
            case events.TurnEnd(message, finish_reason) if step:
                step.raw = event.raw or step.raw
                await sync_to_async(self._save_turn)(step, message, finish_reason)
            case events.ToolCallFinished(result) if step:
                step.results[result.tool_call.id] = result
                await sync_to_async(self._save_tool_result)(step, result)
            case events.RunFinished(status, error, steps):
                await sync_to_async(self._finish)(status, error or "", steps)

    def _first_token(self, step: _Step) -> None:
        now = time.monotonic()
        if step.first_token is None:
            step.first_token = now
        if self.first_token is None:
            self.first_token = now

    def _save_model_call(self, step: _Step, finish_reason: str, error: str = "") -> None:
        now = time.monotonic()
        ModelCall.objects.create(
            run=self.run,
            step=step.number,
            model=str(step.request.get("model", self.run.model)),
            url=step.url,
            request=step.request,
            raw_stream="\n".join(f"{ms:g}\t{line}" for ms, line in step.raw)
            if settings.AGENTLAB_STORE_RAW_STREAM
            else "",
            preflight=step.preflight,
            http_status=step.status_code,
            attempts=step.attempts,
            finish_reason=finish_reason,
            prompt_tokens=step.usage.prompt_tokens,
            completion_tokens=step.usage.completion_tokens,
            total_tokens=step.usage.total_tokens,
            time_to_first_token=(step.first_token - step.started) if step.first_token else None,
            duration=now - step.started,
            error=error,
        )
        step.model_call_saved = True

    @transaction.atomic
    def _save_turn(
        self, step: _Step, message: agent.ChatMessage, finish_reason: str | None
    ) -> None:
        conversation = self.run.conversation
        (row,) = transcripts.append_messages(conversation, [message], run=self.run)
        if not step.model_call_saved:
            self._save_model_call(step, finish_reason or "")
        now = timezone.now()
        ToolCall.objects.bulk_create(
            ToolCall(
                run=self.run,
                message=row,
                step=step.number,
                position=position,
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                started_at=now,
            )
            for position, call in enumerate(message.tool_calls)
        )
        step.message, step.calls = row, list(message.tool_calls)
        step.text.clear()
        step.reasoning.clear()
        self.run.steps = step.number
        self._save_usage(["steps"])

    @transaction.atomic
    def _save_tool_result(self, step: _Step, result: events.ToolResult) -> None:
        ToolCall.objects.filter(
            run=self.run, message=step.message, call_id=result.tool_call.id
        ).update(
            status=result.status,
            result=result.content,
            error=result.error or "",
            finished_at=timezone.now(),
            duration=result.duration,
        )
        if len(step.results) == len(step.calls):
            # Replies are stored in call order once the whole round is in, whatever order the
            # tools finished in; until then the transcript ends on the assistant's tool_calls.
            replies = [step.results[call.id].message for call in step.calls]
            transcripts.append_messages(self.run.conversation, replies, run=self.run)

    def _save_usage(self, extra_fields: list[str]) -> None:
        self.run.prompt_tokens = self.usage.prompt_tokens
        self.run.completion_tokens = self.usage.completion_tokens
        self.run.total_tokens = self.usage.total_tokens
        if self.first_token is not None:
            self.run.time_to_first_token = self.first_token - self.started
        self.run.save(
            update_fields=[
                "prompt_tokens",
                "completion_tokens",
                "total_tokens",
                "time_to_first_token",
                *extra_fields,
            ]
        )

    @transaction.atomic
    def _finish(self, status: str, error: str, steps: int) -> None:
        self.run.status = status
        self.run.error = error
        self.run.steps = max(self.run.steps, steps)
        self.run.duration = time.monotonic() - self.started
        self.run.finished_at = timezone.now()
        self._save_usage(["status", "error", "steps", "duration", "finished_at"])
        Conversation.objects.filter(pk=self.run.conversation_id).update(updated_at=timezone.now())

    async def stop(self, status: str, error: str) -> events.RunFinished:
        """End the run early (cancel, internal error), keeping what streamed, history valid."""
        await asyncio.shield(sync_to_async(self._stop)(status, error))
        return events.RunFinished(
            status=status,  # type: ignore[arg-type]
            error=error,
            steps=self.run.steps,
            usage=self.usage,
        )

    @transaction.atomic
    def _stop(self, status: str, error: str) -> None:
        step = self.step
        if step is not None and step.message is None and (step.text or step.reasoning):
            partial = agent.ChatMessage(
                role="assistant",
                content="".join(step.text) or None,
                reasoning="".join(step.reasoning) or None,
            )
            transcripts.append_messages(self.run.conversation, [partial], run=self.run)
        if step is not None and not step.model_call_saved:
            self._save_model_call(step, "", error)
        if step is not None and step.calls and len(step.results) < len(step.calls):
            replies = [
                step.results[call.id].message
                if call.id in step.results
                else agent.ChatMessage(
                    role="tool",
                    tool_call_id=call.id,
                    content=transcripts.tool_reply(error.rstrip("."))(call),
                )
                for call in step.calls
            ]
            transcripts.append_messages(self.run.conversation, replies, run=self.run)
        self.run.tool_calls.filter(status=ToolCallStatus.IN_PROGRESS).update(
            status=ToolCallStatus.CANCELLED
            if status == RunStatus.CANCELLED
            else ToolCallStatus.FAILED,
            error=error,
            finished_at=timezone.now(),
        )
        transcripts.repair_conversation(
            self.run.conversation, reason=error.rstrip("."), run=self.run
        )
        self._finish(status, error, self.run.steps)
