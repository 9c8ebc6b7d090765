"""Run events into rows: one write per model turn, per tool call and at the end, never per token."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from channels.db import database_sync_to_async as sync_to_async
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from chat import agent, transcripts
from chat.agent import events
from chat.models import (
    Conversation,
    LeaseEnd,
    Message,
    ModelCall,
    Run,
    RunLease,
    RunStatus,
    ToolCall,
    ToolCallStatus,
)
from chat.models.request_store import RequestChain
from chat.turns import Turn

from . import approvals
from .steps import Step, fit, raw_column

if TYPE_CHECKING:
    from .resume import Resumption


class Recorder:
    """Turns run events into rows: one write per model turn, per tool call and at the end.

    A reply that streams for long is checkpointed every AGENTLAB_CHECKPOINT_SECONDS as a draft
    row, so a killed process loses at most that much: writes grow with a run's duration, never
    with its token count.

    It keeps the rows it wrote (replies, tool calls, model calls), so that the finished run's
    turn renders without reading them back (`turn`). `next_index` is the index the run's first
    new message takes, when the caller knows it: appends then cost no query.
    """

    def __init__(self, run: Run, *, next_index: int | None = None) -> None:
        self.run = run
        self.checkpoint_every = settings.AGENTLAB_CHECKPOINT_SECONDS
        self.started = time.monotonic()
        self.first_token: float | None = None
        self.step: Step | None = None
        self.usage = events.Usage()
        self.next_index = next_index
        self.replies: list[Message] = []
        self.tool_calls: list[ToolCall] = []
        self.model_calls: list[ModelCall] = []
        self.requests = RequestChain(run)
        self._final: tuple[Step, agent.ChatMessage, str | None] | None = None
        """A last turn (no tool calls) to be saved in one transaction with the run's end."""
        self._draft: Message | None = None
        """A resumed run's reply that was streaming when its process stopped: overwritten."""

    def resume_from(self, point: Resumption) -> None:
        """Go on with a run another process began: the rows it wrote, its usage and time so
        far, the round of tool calls it was in (see `resume.Resumption`)."""
        run = self.run
        rows = {row.pk: row for row in run.messages.filter(version__isnull=True)}
        if point.draft is not None:
            rows[point.draft.pk] = point.draft  # one object: the turn renders what is written
        self.replies = sorted(rows.values(), key=lambda row: row.index)
        self.tool_calls = list(ToolCall.objects.filter(run=run).defer("raw_result"))
        self.model_calls = list(ModelCall.objects.filter(run=run).without_payloads())
        self.usage = events.Usage(run.prompt_tokens, run.completion_tokens, run.total_tokens)
        self.started -= (timezone.now() - run.started_at).total_seconds()
        self.next_index, self._draft = point.next_index, point.draft
        if point.round_message is not None:
            calls = [agent.ToolCall.from_openai(c) for c in point.round_message.tool_calls]
            now = time.monotonic()
            self.step = Step(point.step, now, model_call_saved=True, message=point.round_message)
            self.step.calls = calls

    @transaction.atomic
    def pause(self) -> None:
        """The run stops at a step boundary for a shutdown: a turn's tool calls, saved but not
        started, are marked so (a resumer runs them, knowing they never ran)."""
        if self.step is not None and self.step.message is not None and not self.step.results:
            ToolCall.objects.filter(run=self.run, message=self.step.message).update(started_at=None)

    @transaction.atomic
    def suspend(self) -> None:
        """The run stops mid-step for a shutdown: what streamed of the reply is saved as its
        draft; calls under way stay in progress (their outcome is unknown to a resumer)."""
        self._save_final()
        step = self.step
        if step is not None and step.message is None and (step.text or step.reasoning):
            self._write_reply(step, self._partial(step))

    async def record(self, event: events.RunEvent) -> None:
        step = self.step
        match event:
            case events.TextDelta(text) if step:  # first: the case of nearly every event
                self._first_token(step)
                step.text.append(text)
                await self._checkpoint(step)
            case events.ReasoningDelta(text) if step:
                self._first_token(step)
                step.reasoning.append(text)
                await self._checkpoint(step)
            case events.StepStarted(number):
                now = time.monotonic()
                self.step = Step(number=number, started=now, checkpointed=now)
                self.step.draft, self._draft = self._draft, None
            case events.PreflightRepaired(_, violations) if step:
                step.preflight = list(violations)
            case events.ModelRequestSent(body, status_code, attempts, url, sha256) if step:
                step.request, step.status_code, step.attempts = body, status_code, attempts
                step.url, step.request_sha256 = url, sha256
            case events.Usage() if step:
                self.usage += event - step.usage
                step.usage = event
            case events.ModelCallFailed() if step:
                if event.request_body:
                    step.request, step.request_sha256 = event.request_body, event.request_sha256
                step.status_code, step.attempts = event.status_code, event.attempts
                step.raw = event.raw
                await sync_to_async(self._save_model_call)(step, "", event.message)
            case events.TurnEnd(message, finish_reason) if step:
                step.raw = event.raw or step.raw
                if message.tool_calls:
                    await sync_to_async(self._save_turn)(step, message, finish_reason)
                else:
                    # The run ends right after a turn without tool calls: one transaction.
                    self._final = (step, message, finish_reason)
            case events.ToolCallFinished(result) if step:
                step.results[result.tool_call.id] = result
                await sync_to_async(self._save_tool_result)(step, result)
            case events.ApprovalRequested(calls, _, sources) if step:
                await sync_to_async(self._ask)(step, calls, sources)
            case events.RunFinished(RunStatus.REQUIRES_ACTION, _, steps):
                await sync_to_async(self._wait)(steps)
            case events.RunFinished(status, error, steps):
                await sync_to_async(self._finish)(status, error or "", steps)

    async def _checkpoint(self, step: Step) -> None:
        if time.monotonic() - step.checkpointed < self.checkpoint_every:
            return
        await sync_to_async(self._write_reply)(step, self._partial(step))
        step.checkpointed = time.monotonic()

    @staticmethod
    def _partial(step: Step) -> agent.ChatMessage:
        """What streamed of the step's reply so far."""
        return agent.ChatMessage(
            role="assistant",
            content="".join(step.text) or None,
            reasoning="".join(step.reasoning) or None,
        )

    def _append(self, messages: list[agent.ChatMessage]) -> list[Message]:
        rows = transcripts.append_messages(
            self.run.conversation, messages, run=self.run, start=self.next_index
        )
        if rows:
            self.next_index = rows[-1].index + 1
        return rows

    def _write_reply(self, step: Step, message: agent.ChatMessage) -> Message:
        """The step's reply row: the draft brought up to date, or a new row."""
        if step.draft is None:
            (step.draft,) = self._append([message])
            self.replies.append(step.draft)
            return step.draft
        for name, value in transcripts.message_fields(message).items():
            setattr(step.draft, name, value)
        step.draft.save(update_fields=list(transcripts.message_fields(message)))
        return step.draft

    def _first_token(self, step: Step) -> None:
        now = time.monotonic()
        if step.first_token is None:
            step.first_token = now
        if self.first_token is None:
            self.first_token = now

    def _save_model_call(self, step: Step, finish_reason: str, error: str = "") -> None:
        model_call = ModelCall(
            run=self.run,
            step=step.number,
            model=fit(ModelCall, "model", str(step.request.get("model", self.run.model))),
            url=step.url,
            raw_stream_zlib=raw_column(step.raw),
            preflight=step.preflight,
            http_status=step.status_code,
            attempts=step.attempts,
            finish_reason=fit(ModelCall, "finish_reason", finish_reason),
            prompt_tokens=step.usage.prompt_tokens,
            completion_tokens=step.usage.completion_tokens,
            total_tokens=step.usage.total_tokens,
            time_to_first_token=(step.first_token - step.started) if step.first_token else None,
            duration=time.monotonic() - step.started,
            error=error,
        )
        self.requests.save(model_call, step.request, step.request_sha256)
        self.model_calls.append(model_call)
        step.model_call_saved = True

    @transaction.atomic
    def _save_turn(
        self,
        step: Step,
        message: agent.ChatMessage,
        finish_reason: str | None,
        *,
        last: bool = False,
    ) -> None:
        """The turn's reply, its model call and its tool calls; with `last`, the run's row is
        left to `_finish`, which follows in the same transaction."""
        row = self._write_reply(step, message)
        if not step.model_call_saved:
            self._save_model_call(step, finish_reason or "")
        now = timezone.now()
        calls = ToolCall.objects.bulk_create(
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
        self.tool_calls.extend(calls)
        step.message, step.calls = row, list(message.tool_calls)
        step.text.clear()
        step.reasoning.clear()
        self.run.steps = step.number
        if not last:
            self._save_usage(["steps"])

    @transaction.atomic
    def _save_tool_result(self, step: Step, result: events.ToolResult) -> None:
        now, call_id = timezone.now(), result.tool_call.id
        fields = {
            "status": result.status,
            "result": result.content,
            "error": result.error or "",
            "finished_at": now,
            "duration": result.duration,
            "raw_result": result.raw,
            "failure": result.failure,
            "policy": result.policy,
        }
        if result.source:  # a denial keeps the server its call was asked on
            fields["server"] = fit(ToolCall, "server", result.source)
        message_id = step.message.pk if step.message is not None else None
        rows = [r for r in self.tool_calls if r.message_id == message_id and r.call_id == call_id]
        if any(row.started_at is None for row in rows):  # its round waited, or was paused
            fields["started_at"] = now - timedelta(seconds=result.duration)
        ToolCall.objects.filter(run=self.run, message=step.message, call_id=call_id).update(
            **fields
        )
        for row in rows:
            for name, value in fields.items():
                setattr(row, name, value)
        if len(step.results) == len(step.calls):
            # Replies are stored in call order once the whole round is in, whatever order the
            # tools finished in; until then the transcript ends on the assistant's tool_calls.
            self._append([step.results[call.id].message for call in step.calls])

    def _rows(self, step: Step) -> list[ToolCall]:
        message_id = step.message.pk if step.message is not None else None
        return [row for row in self.tool_calls if row.message_id == message_id]

    def _ask(self, step: Step, calls: tuple[agent.ToolCall, ...], sources: tuple[str, ...]) -> None:
        servers = {call.id: source for call, source in zip(calls, sources, strict=False)}
        asked = approvals.ask(self.run, step.message, servers, step.results)
        for row in self._rows(step):
            if row.call_id not in step.results:
                row.started_at = None
                for name, value in asked.get(row.call_id, {}).items():
                    setattr(row, name, value)

    @transaction.atomic
    def _wait(self, steps: int) -> None:
        """The run waits for a person's decision: no process holds it (its lease ends, the
        sweeper leaves it alone) until the decision, or AGENTLAB_APPROVAL_TIMEOUT."""
        run = self.run
        now = timezone.now()
        run.status = RunStatus.REQUIRES_ACTION
        run.steps = max(run.steps, steps)
        run.duration = time.monotonic() - self.started
        run.waiting_until = now + timedelta(seconds=settings.AGENTLAB_APPROVAL_TIMEOUT)
        run.worker, run.lease_expires_at = "", None
        self._save_usage(
            ["status", "steps", "duration", "waiting_until", "worker", "lease_expires_at"]
        )
        RunLease.objects.filter(run=run, ended_at=None).update(
            ended_at=now, outcome=LeaseEnd.WAITING
        )
        Conversation.objects.filter(pk=run.conversation_id).update(updated_at=now)

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

    def _save_final(self) -> None:
        """Save the last turn held back for the run's end (call inside its transaction)."""
        if self._final is not None:
            step, message, finish_reason = self._final
            self._final = None
            self._save_turn(step, message, finish_reason, last=True)

    @transaction.atomic
    def _finish(self, status: str, error: str, steps: int) -> None:
        self._save_final()
        self.run.status = status
        self.run.error = error
        self.run.steps = max(self.run.steps, steps)
        self.run.duration = time.monotonic() - self.started
        self.run.finished_at = timezone.now()
        self._save_usage(["status", "error", "steps", "duration", "finished_at"])
        RunLease.objects.filter(run=self.run, ended_at=None).update(
            ended_at=self.run.finished_at, outcome=LeaseEnd.FINISHED
        )
        Conversation.objects.filter(pk=self.run.conversation_id).update(updated_at=timezone.now())

    def turn(self, user: Message | None) -> Turn:
        """The finished run's turn from the rows written here, as `turn_for_run` would read
        them back (a run that just ended has no annotations yet)."""
        replies = [row for row in self.replies if row.role == Message.Role.ASSISTANT]
        calls, model_calls = list(self.tool_calls), list(self.model_calls)
        return Turn(user, self.run, replies, tool_calls=calls, model_calls=model_calls)

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
        self._save_final()
        step = self.step
        if step is not None and step.message is None and (step.text or step.reasoning):
            self._write_reply(step, self._partial(step))
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
            self._append(replies)
        ended = {
            "status": ToolCallStatus.CANCELLED
            if status == RunStatus.CANCELLED
            else ToolCallStatus.FAILED,
            "error": error,
            "finished_at": timezone.now(),
        }
        ToolCall.objects.filter(run=self.run).in_progress().update(**ended)
        for row in self.tool_calls:
            if row.is_active:
                for name, value in ended.items():
                    setattr(row, name, value)
        transcripts.repair_conversation(
            self.run.conversation, reason=error.rstrip("."), run=self.run
        )
        self.next_index = None  # the repair may have added or removed messages
        self._finish(status, error, self.run.steps)
