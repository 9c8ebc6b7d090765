"""An agent judged by its own cases: a version evaluated on the agent's suite (or another case
set), and publishing through the suite.

Publishing a version of an agent with a suite evaluates the version on it first, beside the
published version's result on the same cases (an earlier evaluation when one covers exactly
these cases, else one made alongside). With `require_suite_pass` the version is published only
if it passes at least as many cases; without, it is published whatever it passed, the two
results kept side by side. What became of it is the evaluation's `outcome`.

Planning writes the rows (and refuses, writing nothing); running is the evaluations' own
machinery: `run_publication` to the end (the terminal), `start_publication` as a task of this
process whose page shows its progress (the browser).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async as sync_to_async
from django.db import transaction

from chat import access
from chat.access import AgentAction
from chat.evals import compare, lifecycle, replay
from chat.models import AgentVersion, Case, CaseSet, EvalRun, EvalStatus
from chat.runs import RunRefused, tasks

from .exceptions import AgentRefused
from .publishing import lock, mark_published, publish
from .versions import check_endpoint

REUSED_CANDIDATES = 5
"""How many of the published version's latest evaluations are looked at for one to reuse."""


@dataclass(frozen=True)
class Planned:
    """An evaluation about to run: its row, its cases and its target."""

    eval_run: EvalRun
    cases: list[Case]
    target: replay.Target


@dataclass(frozen=True)
class Publishing:
    """A publication waiting on the suite: the version's evaluation (`publishes`, its
    `baseline` the published version's), and the baseline's when it is to run too."""

    candidate: Planned
    baseline: Planned | None


def suite_of(version: AgentVersion, case_set: CaseSet | None = None) -> tuple[CaseSet, list[Case]]:
    """The case set a version is evaluated on (the given one, else its agent's suite) and its
    cases; AgentRefused when there is none, or it has no case."""
    case_set = case_set or version.agent.suite
    if case_set is None:
        raise AgentRefused(
            f"{version.agent.name} has no suite: attach a case set to it on its page, or name "
            "the case set to evaluate on."
        )
    found = list(case_set.cases.select_related("case_set").order_by("pk"))
    if not found:
        raise AgentRefused(f"The case set {case_set.name!r} has no cases yet.")
    return case_set, found


def plan_evaluation(
    version: AgentVersion,
    *,
    user: Any,
    case_set: CaseSet | None = None,
    repeat: int = 1,
    continue_loop: bool = False,
) -> Planned:
    """An evaluation of the version on a case set (its agent's suite by default). Refused
    (AgentRefused, nothing written): an agent `user` may not use, an endpoint they may not
    use, no suite, no cases, attempts out of bounds."""
    if refused := access.agent_denied(user, AgentAction.USE, version.agent):
        raise AgentRefused(refused)
    check_endpoint(user, version)
    case_set, found = suite_of(version, case_set)
    try:
        target = replay.target(version=version)
        eval_run = replay.create_eval_run(
            found,
            target,
            user=user,
            case_set=case_set,
            repeat=repeat,
            continue_loop=continue_loop,
        )
    except RunRefused as exc:
        raise AgentRefused(str(exc)) from None
    return Planned(eval_run, found, target)


def plan_publication(version: AgentVersion, *, user: Any) -> Publishing | None:
    """The evaluations publishing `version` waits on; None when its agent has no suite with
    cases (publish at once). Refused: `user` may not change the agent, or may not use the
    endpoint of a version to evaluate; the version is already published."""
    agent = version.agent
    if refused := access.agent_denied(user, AgentAction.CHANGE, agent):
        raise AgentRefused(refused)
    if agent.published_id == version.pk:
        raise AgentRefused(f"{version} is already published.")
    if agent.suite is None or not agent.suite.cases.exists():
        return None
    with transaction.atomic():
        case_set, found = suite_of(version)
        baseline: Planned | None = None
        compared = None
        if agent.published is not None:
            compared = reusable(agent.published, case_set, found)
            if compared is None:
                baseline = plan_evaluation(agent.published, user=user, case_set=case_set)
                compared = baseline.eval_run
        candidate = plan_evaluation(version, user=user, case_set=case_set)
        candidate.eval_run.publishes = True
        candidate.eval_run.baseline = compared
        candidate.eval_run.save(update_fields=["publishes", "baseline"])
    return Publishing(candidate, baseline)


def publish_or_plan(version: AgentVersion, *, user: Any) -> Publishing | None:
    """Publish `version` at once when its agent has no suite with cases (None); otherwise the
    evaluations its publication waits on, for the caller to run. Refused as `plan_publication`."""
    publishing = plan_publication(version, user=user)
    if publishing is None:
        publish(version=version, user=user)
    return publishing


def reusable(version: AgentVersion, case_set: CaseSet, found: list[Case]) -> EvalRun | None:
    """The version's latest completed evaluation of exactly these cases, once each."""
    wanted = [case.pk for case in found]
    latest = EvalRun.objects.filter(
        agent_version=version,
        case_set=case_set,
        status=EvalStatus.COMPLETED,
        repeat=1,
        continue_loop=False,
    ).order_by("-started_at", "-pk")
    for eval_run in latest[:REUSED_CANDIDATES]:
        covered = compare.covered_cases(eval_run)
        if covered is not None and [case.pk for case in covered] == wanted:
            return eval_run
    return None


def conclude(eval_run: EvalRun, user: Any) -> str:
    """Publish the evaluated version if the gate lets it; what became of it (stored as the
    evaluation's `outcome`). The gate is asked of the agent as it is now, under its row lock:
    a version published meanwhile is not overtaken."""
    eval_run.refresh_from_db()
    version = eval_run.agent_version
    baseline = eval_run.baseline
    if version is None:
        outcome = "Not published: the version was deleted."
    elif eval_run.status != EvalStatus.COMPLETED:
        outcome = f"Not published: the evaluation ended {eval_run.status}."
    else:
        try:
            with transaction.atomic():
                agent = lock(version.agent_id)
                outcome = _gate(eval_run, version, baseline, agent, user)
        except AgentRefused as exc:
            outcome = f"Not published: {exc}"
    EvalRun.objects.filter(pk=eval_run.pk).update(outcome=outcome)
    eval_run.outcome = outcome
    return outcome


def _gate(
    eval_run: EvalRun, version: AgentVersion, baseline: EvalRun | None, agent: Any, user: Any
) -> str:
    if refused := access.agent_denied(user, AgentAction.CHANGE, agent):
        return f"Not published: {refused}"
    if agent.published_id == version.pk:
        return f"{version} was published meanwhile."
    compared_with = baseline.agent_version_id if baseline is not None else None
    if agent.published_id != compared_with:
        return (
            f"Not published: another version of {agent.name} was published meanwhile; "
            "publish again to compare with it."
        )
    mine = passed_text(eval_run)
    if baseline is not None and agent.require_suite_pass:
        if baseline.status != EvalStatus.COMPLETED:
            ended = baseline.status
            return f"Not published: the evaluation of {baseline.agent_version} ended {ended}."
        if eval_run.passed < baseline.passed:
            return (
                f"Not published: {version} passed {mine}, fewer than "
                f"{baseline.agent_version} ({passed_text(baseline)}); {agent.name} requires at "
                "least as many."
            )
    mark_published(agent, version, user)
    beside = f"; {baseline.agent_version} passed {passed_text(baseline)}" if baseline else ""
    return f"Published {version}: it passed {mine}{beside}."


def passed_text(eval_run: EvalRun) -> str:
    """`4 of 5 cases` (attempts when it repeats)."""
    things = "cases" if eval_run.repeat == 1 else "attempts"
    return f"{eval_run.passed} of {eval_run.total} {things}"


def run_publication(publishing: Publishing, *, user: Any) -> str:
    """Run the publication's evaluations to their end in a new event loop and conclude; the
    outcome. Interrupted (Ctrl-C), the evaluations end cancelled and nothing is published."""

    async def work() -> None:
        planned = [publishing.candidate, *([publishing.baseline] if publishing.baseline else [])]
        await asyncio.gather(
            *(replay.run_eval(p.eval_run, p.cases, p.target, user=user) for p in planned)
        )

    try:
        asyncio.run(work())
    finally:
        outcome = conclude(publishing.candidate.eval_run, user)
    return outcome


def start_publication(publishing: Publishing, *, user: Any) -> asyncio.Task[Any]:
    """The publication's evaluations as tasks of this process, each page told of its progress;
    the version's evaluation concludes (after the baseline's) before its end is told."""
    baseline = publishing.baseline
    waiting = (
        lifecycle.start_eval(baseline.eval_run, baseline.cases, baseline.target, user=user)
        if baseline is not None
        else None
    )

    async def concluding(eval_run: EvalRun) -> None:
        if waiting is not None and eval_run.status == EvalStatus.COMPLETED:
            await asyncio.wait([waiting])
        await sync_to_async(conclude)(eval_run, user)

    candidate = publishing.candidate
    return tasks.launch(
        lifecycle.watched(
            candidate.eval_run, candidate.cases, candidate.target, user=user, concluding=concluding
        )
    )
