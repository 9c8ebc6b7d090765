"""DebugRuntime: the loop between the ChatAgent (a ChatClient) and the EventAgent."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from . import approvals, history
from .clients import ChatClient
from .contracts import DebugRunRequest
from .errors import ChatClientError, StreamError
from .events import (
    ApprovalRequested,
    ModelCallFailed,
    PreflightRepaired,
    ReasoningDelta,
    RunEvent,
    RunFinished,
    StepStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallProgress,
    ToolCallStarted,
    ToolResult,
    TurnEnd,
    Usage,
)
from .messages import ChatMessage, ToolCall
from .offer import too_many_tools
from .tools import EventAgent, ToolRegistry, default_registry

PREFLIGHT = "not answered before this request; the pre-flight check closed it"
FINISH_REASON_ERRORS = {
    "length": "The reply was cut off: the model reached its token limit (finish_reason: length).",
    "content_filter": "The provider's content filter stopped the reply "
    "(finish_reason: content_filter).",
}


class DebugRuntime:
    """Runs one user turn: model turn, tool calls, model turn again, up to max_event_loops.

    `messages` is the provider-facing history as it grows; after every event it is strict-valid
    except between a `TurnEnd` with tool calls and the last `ToolCallFinished` of that step.
    The run's tools are its `registry` (by default a copy of the built-in ones): passed to the
    run, never looked up in a registry other runs change.
    """

    def __init__(
        self,
        *,
        client: ChatClient,
        registry: ToolRegistry | None = None,
        max_tool_rounds: int | None = None,
        approvals: bool = True,
    ) -> None:
        self.client = client
        self.registry = registry if registry is not None else default_registry.copy()
        self.max_tool_rounds = max_tool_rounds
        """With a number, the run completes after that many rounds of tool calls (an evaluation
        that looks only at the model's first decision)."""
        self.approvals = approvals
        """Without, no call waits and none is refused by policy (an evaluation's replay, whose
        tools never run)."""
        self.messages: list[ChatMessage] = []
        self.waiting: tuple[ToolCall, ...] = ()
        """The calls the run waits on, once it ended `requires_action`."""

    async def run(
        self, request: DebugRunRequest, *, resume: Resume | None = None
    ) -> AsyncGenerator[RunEvent]:
        """The run's events. With `resume`, a run another process began goes on from its
        stored history: the round of tool calls it was in is finished first (see Resume)."""
        parameters = request.parameters
        self.messages = request.messages()
        tools = self.registry.definitions(parameters.enabled_tools)
        policies = parameters.tool_policies if self.approvals else None
        event_agent = EventAgent(self.registry, parameters.enabled_tools, policies)
        usage = Usage()
        max_steps = parameters.max_event_loops
        if refused := too_many_tools(self.registry.sources(parameters.enabled_tools)):
            # No provider would take the request: refused before one is sent.
            yield RunFinished(status="failed", error=refused, steps=0, usage=usage)
            return
        first = 1 if resume is None else resume.step
        pending = self.messages[-1].tool_calls if resume is not None and self.messages else ()
        if resume is not None and pending:
            async for event in self._round(
                event_agent, pending, resume.step, resume.answered, resume.approved
            ):
                yield event
            if self.waiting:
                yield RunFinished(status="requires_action", steps=resume.step, usage=usage)
                return
            first += 1
            if self.max_tool_rounds is not None and resume.step >= self.max_tool_rounds:
                yield RunFinished(status="completed", error=None, steps=resume.step, usage=usage)
                return

        for step in range(first, max_steps + 1):
            yield StepStarted(step=step, max_steps=max_steps)
            violations = history.validate(self.messages)
            if violations:
                repaired = history.repair(self.messages, reply=history.error_reply(PREFLIGHT))
                remaining = history.validate(repaired)
                if remaining:
                    yield RunFinished(
                        status="failed",
                        error="Pre-flight check: the history cannot be sent as it is: "
                        + "; ".join(str(v) for v in remaining),
                        steps=step - 1,
                        usage=usage,
                    )
                    return
                self.messages = repaired
                yield PreflightRepaired(step, tuple(str(v) for v in violations))
            text: list[str] = []
            reasoning: list[str] = []
            turn: TurnEnd | None = None
            step_usage = Usage()
            try:
                async for item in self.client.stream(
                    self.messages, tools=tools, parameters=parameters
                ):
                    if isinstance(item, TurnEnd):
                        turn = dataclasses.replace(item, step=step)
                        continue
                    if isinstance(item, TextDelta):
                        text.append(item.text)
                    elif isinstance(item, ReasoningDelta):
                        reasoning.append(item.text)
                    elif isinstance(item, Usage):
                        # Some servers repeat running totals on every chunk: the last one counts.
                        step_usage = item
                    yield item
            except ChatClientError as exc:
                usage += step_usage
                yield ModelCallFailed(
                    step=step,
                    message=str(exc),
                    status_code=exc.status_code,
                    request_body=exc.request_body,
                    attempts=exc.attempts,
                    raw=exc.raw,
                    request_sha256=exc.request_sha256,
                )
                partial = exc.partial if isinstance(exc, StreamError) else None
                if partial is None and (text or reasoning):
                    partial = ChatMessage(
                        role="assistant",
                        content="".join(text) or None,
                        reasoning="".join(reasoning) or None,
                    )
                if partial is not None:
                    self.messages.append(partial)
                    yield TurnEnd(partial, None, step)
                yield RunFinished(status="failed", error=str(exc), steps=step, usage=usage)
                return
            usage += step_usage
            if turn is None:
                raise RuntimeError(f"{type(self.client).__name__}.stream() ended without TurnEnd")

            message = _own_tool_calls(turn.message, self.messages)
            turn = dataclasses.replace(turn, message=message)
            self.messages.append(message)
            yield turn

            if not message.tool_calls:
                error = FINISH_REASON_ERRORS.get(turn.finish_reason or "")
                if error is None and not message.content:
                    error = "The model returned an empty reply."
                yield RunFinished(
                    status="failed" if error else "completed",
                    error=error,
                    steps=step,
                    usage=usage,
                )
                return

            async for event in self._round(event_agent, message.tool_calls, step):
                yield event
            if self.waiting:
                yield RunFinished(status="requires_action", steps=step, usage=usage)
                return
            if self.max_tool_rounds is not None and step >= self.max_tool_rounds:
                yield RunFinished(status="completed", error=None, steps=step, usage=usage)
                return

        yield RunFinished(
            status="failed",
            error=f"Stopped after {max_steps} model turns (max_event_loops) while the model was "
            "still calling tools; its tool calls were answered, so the conversation can go on.",
            steps=max_steps,
            usage=usage,
        )

    async def _round(
        self,
        event_agent: EventAgent,
        calls: Sequence[ToolCall],
        step: int,
        answered: Mapping[str, ToolResult] | None = None,
        approved: Collection[str] = (),
    ) -> AsyncIterator[RunEvent]:
        """Run a turn's tool calls (those not `answered` already) and add every reply to the
        history, in call order whatever order the tools finished in.

        A call whose tool asks first and that is not `approved` makes the whole round wait:
        `ApprovalRequested` names the waiting calls, nothing runs, and `waiting` holds them.
        A call whose tool is never to run is answered so at once."""
        known = dict(answered or {})
        if self.approvals:
            policies = {call.id: event_agent.policy(call) for call in calls if call.id not in known}
            for call in calls:
                if policies.get(call.id) == "never":
                    known[call.id] = approvals.not_allowed(call)
            waiting = tuple(
                call for call in calls if policies.get(call.id) == "ask" and call.id not in approved
            )
            if waiting:
                for call in calls:
                    if call.id in known:
                        yield ToolCallFinished(known[call.id], step)
                self.waiting = waiting
                sources = tuple(self.registry.source_of(call.name) for call in waiting)
                yield ApprovalRequested(waiting, step, sources)
                return
        to_run = [call for call in calls if call.id not in known]
        for call in to_run:
            yield ToolCallStarted(call, step)
        for call in calls:
            if call.id in known:
                yield ToolCallFinished(known[call.id], step)
        async for heard in event_agent.stream(to_run):
            if isinstance(heard, ToolCallProgress):
                yield dataclasses.replace(heard, step=step)
                continue
            known[heard.tool_call.id] = heard
            yield ToolCallFinished(heard, step)
        self.messages.extend(known[call.id].message for call in calls)


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a resumed run goes on: `step` is the model turn it is in. When the history ends
    with that turn's tool calls, their round is finished first: the calls in `answered` (they
    finished before, are not repeated, or were denied) are not run again, the others are;
    those `approved` by a person run although their tools ask first."""

    step: int
    answered: Mapping[str, ToolResult] = field(default_factory=dict)
    approved: frozenset[str] = frozenset()


UNNAMED_TOOL = "unnamed_tool"
MAX_ID_CHARS = 200
"""Longer tool call ids and names are no provider's real ones (OpenAI's names stop at 64); they
are replaced, so that every id can be stored and sent back."""


def _own_tool_calls(message: ChatMessage, history: list[ChatMessage]) -> ChatMessage:
    """Make a turn's tool calls safe to send back to a strict provider, whatever it sent.

    A call without a name (or with one over MAX_ID_CHARS) gets the name `unnamed_tool` (it then
    fails as an unknown tool, which the model reads); an id used earlier in the conversation or
    twice in the turn (servers that number calls per turn), or over MAX_ID_CHARS, gets a fresh
    one. Once stored, the ids are ours.
    """
    if not message.tool_calls:
        return message
    taken = {call.id for m in history for call in m.tool_calls}
    calls = []
    for call in message.tool_calls:
        changes: dict[str, str] = {}
        if not call.name.strip() or len(call.name) > MAX_ID_CHARS:
            changes["name"] = UNNAMED_TOOL
        if not call.id or call.id in taken or len(call.id) > MAX_ID_CHARS:
            changes["id"] = f"call_{uuid.uuid4().hex[:24]}"
        call = call.model_copy(update=changes) if changes else call
        taken.add(call.id)
        calls.append(call)
    return message.model_copy(update={"tool_calls": tuple(calls)})
