"""Replaying cases on a model: each attempt is an ordinary run in a conversation of its own
(purpose "eval", hidden from the sidebar), so every request is a ModelCall the inspector shows;
its first model turn is the decision compared with the case's expectation.

Tools are never executed: the case's tools answer from its recorded results (`--continue`), or
each call is answered "not run" and the run ends after that first decision.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from channels.db import database_sync_to_async as sync_to_async
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from chat import agent, transcripts
from chat.agent import decisions
from chat.agent.clients import ChatClient
from chat.agent.contracts import validation_text
from chat.agent.http import display_url
from chat.agent.runtime import DebugRuntime
from chat.evals.gated import gated_calls
from chat.evals.replayed import replayed, version_parameters
from chat.models import (
    AgentVersion,
    Case,
    CaseSet,
    Comparison,
    Conversation,
    EvalResult,
    EvalRun,
    EvalStatus,
    Message,
    ProviderProfile,
    Purpose,
    ResultVerdict,
    Run,
    RunStatus,
)
from chat.runs import Endpoint, RunRefused, build_client, endpoint, execute_run, liveness, tasks
from chat.transcripts import attachments as stored_files

logger = logging.getLogger(__name__)

CONCURRENCY = 4
"""Attempts of one evaluation in flight at once."""
MAX_REPEAT = 100

ResultListener = Callable[[EvalRun, EvalResult], Awaitable[None]]
INTERRUPTED = "Interrupted: the server process stopped during the evaluation."


@dataclass(frozen=True)
class Target:
    """The model an evaluation replays on: an endpoint (a profile's, the environment's, a
    terminal's --base-url) and the key a terminal gave for it; with an agent version, its
    endpoint, and its prompts, pre-messages, tools and parameters instead of the cases'."""

    endpoint: Endpoint
    api_key: str | None = None
    version: AgentVersion | None = None

    @property
    def label(self) -> str:
        profile = self.endpoint.profile
        label = f"{self.endpoint.label} ({profile.name})" if profile else self.endpoint.label
        return f"{self.version} · {label}" if self.version is not None else label

    def client(self) -> ChatClient:
        return build_client(self.endpoint, api_key=self.api_key)


def target(
    *,
    profile: ProviderProfile | None = None,
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    version: AgentVersion | None = None,
) -> Target:
    """A target by the rules runs use (`runs.endpoint`); an agent version's is its own endpoint
    and model. RunRefused when it has no model, or when a version is given another endpoint."""
    if version is not None:
        if profile is not None or model or base_url:
            raise RunRefused(
                f"{version} brings its own endpoint and model: choose it without a profile, "
                "a model or a base URL."
            )
        model = version_parameters(version).model
        profile = version.profile
    chosen = Target(
        endpoint(profile, model=model or None, base_url=base_url or None), api_key, version
    )
    chosen.client()  # refuses an HTTP endpoint without a model before anything is written
    return chosen


class Plan(TypedDict, total=False):
    """What an evaluation replays besides its cases and target, as `create_eval_run` takes it."""

    case_set: CaseSet | None
    repeat: int
    continue_loop: bool


def create_eval_run(
    cases: Sequence[Case],
    chosen: Target,
    *,
    user: Any,
    case_set: CaseSet | None = None,
    repeat: int = 1,
    continue_loop: bool = False,
    comparison: Comparison | None = None,
) -> EvalRun:
    if not cases:
        raise RunRefused("There are no cases to replay.")
    if not 1 <= repeat <= MAX_REPEAT:
        raise RunRefused(f"--repeat takes 1 to {MAX_REPEAT} attempts per case.")
    names = {case.case_set.name for case in cases}
    return EvalRun.objects.create(
        case_set=case_set,
        set_name=case_set.name if case_set else ", ".join(sorted(names))[:100],
        comparison=comparison,
        label=chosen.label[:200],
        model=chosen.endpoint.model[:200],
        base_url=display_url(chosen.endpoint.base_url)[:500],
        profile=chosen.endpoint.profile,
        agent_version=chosen.version,
        repeat=repeat,
        continue_loop=continue_loop,
        total=len(cases) * repeat,
        case_ids=[case.pk for case in cases],
        worker=tasks.WORKER_ID,
        heartbeat_at=timezone.now(),
        lease_expires_at=timezone.now() + tasks.lease(),
        started_by=user if getattr(user, "is_authenticated", False) else None,
    )


async def run_eval(
    eval_run: EvalRun,
    cases: Sequence[Case],
    chosen: Target,
    *,
    user: Any,
    listeners: Sequence[ResultListener] = (),
    concurrency: int = CONCURRENCY,
    attempts: Sequence[tuple[Case, int]] | None = None,
) -> EvalRun:
    """Replay every case `eval_run.repeat` times (or only these `attempts`: a resumed
    evaluation's rest), saving a result as each attempt ends and telling the listeners; the
    evaluation ends completed, or cancelled when its task is (Stop from any process:
    `tasks.EVALUATIONS.request_cancel`). When its process stops, it is let go for another
    process to resume (`evals.resume`)."""
    gate = asyncio.Semaphore(concurrency)
    release = tasks.EVALUATIONS.hold(eval_run.pk, eval_run.pk)

    async def attempt(case: Case, number: int) -> None:
        async with gate:
            result = await replay(case, eval_run, chosen, user=user, attempt=number)
        for listener in listeners:
            try:
                await listener(eval_run, result)
            except Exception:
                logger.exception("eval %s: a listener failed", eval_run.pk)

    if attempts is None:
        attempts = [(case, n) for case in cases for n in range(1, eval_run.repeat + 1)]
    work = [attempt(case, n) for case, n in attempts]
    try:
        await asyncio.gather(*work)
    except asyncio.CancelledError:
        if tasks.stopping.is_set() and eval_run.case_ids:
            await asyncio.shield(sync_to_async(tasks.EVALUATIONS.release)(eval_run.pk))
            raise
        status, reason = (
            (EvalStatus.INTERRUPTED, INTERRUPTED)
            if tasks.stopping.is_set()
            else (EvalStatus.CANCELLED, "Stopped by the user.")
        )
        await asyncio.shield(_finish(eval_run, status, reason))
        raise
    except Exception as exc:
        logger.exception("eval %s failed", eval_run.pk)
        await _finish(eval_run, EvalStatus.FAILED, f"Internal error: {type(exc).__name__}")
        return eval_run
    finally:
        release()
    await _finish(eval_run, EvalStatus.COMPLETED, "")
    return eval_run


async def _finish(eval_run: EvalRun, status: str, error: str) -> None:
    def save() -> None:
        EvalRun.objects.in_progress().filter(pk=eval_run.pk).update(
            status=status, error=error, finished_at=timezone.now()
        )
        eval_run.refresh_from_db()

    await sync_to_async(save)()


async def replay(
    case: Case, eval_run: EvalRun, chosen: Target, *, user: Any, attempt: int = 1
) -> EvalResult:
    """One attempt at one case: a run on the case's history, its decision judged."""
    preparing = asyncio.ensure_future(sync_to_async(_prepare)(case, eval_run, chosen.version, user))
    try:
        run, request, registry = await asyncio.shield(preparing)
        client = chosen.client()
    except (RunRefused, ValueError) as exc:
        return await sync_to_async(_save)(case, eval_run, attempt, ResultVerdict.ERROR, str(exc))
    except asyncio.CancelledError:
        # Stopped while the attempt's rows were being written (in a thread, which goes on):
        # its run ends stopped, not left in progress.
        await asyncio.wait([preparing])
        if not preparing.cancelled() and preparing.exception() is None:
            await sync_to_async(_abandon)(preparing.result()[0])
        raise
    runtime = DebugRuntime(
        client=client,
        registry=registry,
        max_tool_rounds=None if eval_run.continue_loop else 1,
        approvals=False,
    )
    task = asyncio.create_task(execute_run(run, request, client, runtime=runtime))
    tasks.RUNS.register(run.pk, task)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait([task])
        raise
    return await sync_to_async(_judge)(case, eval_run, run, attempt)


def _abandon(run: Run) -> None:
    status, reason = liveness.stopped()
    Run.objects.in_progress().filter(pk=run.pk).update(
        status=status, error=reason, finished_at=timezone.now()
    )


def _prepare(
    case: Case, eval_run: EvalRun, version: AgentVersion | None, user: Any
) -> tuple[Run, agent.DebugRunRequest, agent.ToolRegistry]:
    """The attempt's conversation (the case's history), its run, and what to execute."""
    history, stored, tools = replayed(case, version)
    registry = decisions.replay_registry(tools, case.fixtures if eval_run.continue_loop else None)
    try:
        parameters = agent.AgentParameters.model_validate(
            {**stored, "enabled_tools": registry.names()}, context={"registry": registry}
        )
        request = agent.DebugRunRequest.model_validate(
            {"parameters": parameters, "history": history, "user_message": None},
            context={"registry": registry},
        )
        request = stored_files.request_with_contents(request)
    except ValueError as exc:
        raise RunRefused(f"The case cannot be replayed: {validation_text(exc)}") from None
    with transaction.atomic():
        conversation = Conversation(
            owner=user,
            title=f"{case.title} · eval {eval_run.pk} · {eval_run.label}"[:200],
            purpose=Purpose.EVAL,
            shared=True,  # an evaluation is the team's: every member may inspect its runs
            profile=eval_run.profile,
            agent_version=version,
        )
        if version is None:
            conversation.parameters = {"model": eval_run.model} if eval_run.model else {}
        else:
            conversation.set_agent_parameters(parameters)
        conversation.save()
        transcripts.append_messages(conversation, list(history), start=0)
        run = Run.objects.create(
            conversation=conversation,
            created_by=user,
            worker=tasks.WORKER_ID,
            heartbeat_at=timezone.now(),
            model=eval_run.model,
            parameters=parameters.to_json(),
        )
    # The request's history is already the conversation's: the run continues it.
    return run, request, registry


def _judge(case: Case, eval_run: EvalRun, run: Run, attempt: int) -> EvalResult:
    run.refresh_from_db()
    turns = list(
        run.messages.filter(role=Message.Role.ASSISTANT, version__isnull=True).order_by("index")
    )
    first = transcripts.to_chat_message(turns[0]) if turns else None
    if first is None or (
        run.status == RunStatus.FAILED and not first.tool_calls and not first.content
    ):
        reason = run.error or f"The run ended {run.status}."
        return _save(case, eval_run, attempt, ResultVerdict.ERROR, reason, run=run)
    got = decisions.decision(first)
    verdict = decisions.compare(case.expected, got)
    reason = verdict.reason
    if run.status != RunStatus.COMPLETED and run.error:
        reason = f"{reason}; " if reason else ""
        reason += f"the run ended {run.status}: {run.error}"
    answer = turns[-1].content or "" if eval_run.continue_loop and turns else ""
    judged = ResultVerdict.PASSED if verdict.passed else ResultVerdict.FAILED
    gated = gated_calls(run.parameters or {}, first.tool_calls)
    return _save(
        case, eval_run, attempt, judged, reason, got=got, answer=answer, run=run, gated=gated
    )


@transaction.atomic
def _save(
    case: Case,
    eval_run: EvalRun,
    attempt: int,
    verdict: str,
    reason: str,
    *,
    got: dict[str, Any] | None = None,
    answer: str = "",
    run: Run | None = None,
    gated: list[dict[str, str]] | None = None,
) -> EvalResult:
    """An attempt's result, with its run's time and usage when it made one, counted on its
    evaluation at once (the progress bars read the counters)."""
    result = EvalResult.objects.create(
        eval_run=eval_run,
        case=case,
        case_title=case.title,
        attempt=attempt,
        verdict=verdict,
        reason=reason,
        expected=case.expected,
        got=got,
        answer=answer,
        run=run,
        latency=run.duration if run else None,
        prompt_tokens=run.prompt_tokens if run else 0,
        completion_tokens=run.completion_tokens if run else 0,
        gated_calls=gated or [],
    )
    counter = "passed" if result.passed else "failed"
    EvalRun.objects.filter(pk=eval_run.pk).update(**{counter: F(counter) + 1})
    setattr(eval_run, counter, getattr(eval_run, counter) + 1)
    return result


def evaluate(
    cases: Sequence[Case],
    chosen: Target,
    *,
    user: Any,
    concurrency: int = CONCURRENCY,
    **plan: Unpack[Plan],
) -> EvalRun:
    """Create and run an evaluation to its end in a new event loop (the terminal's way)."""
    eval_run = create_eval_run(cases, chosen, user=user, **plan)
    asyncio.run(run_eval(eval_run, cases, chosen, user=user, concurrency=concurrency))
    eval_run.refresh_from_db()
    return eval_run


def results(eval_run: EvalRun) -> list[EvalResult]:
    """An evaluation's results in case order, then attempt."""
    return list(eval_run.results.order_by("case_id", "case_title", "attempt", "pk"))
