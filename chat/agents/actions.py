"""The agent page's buttons: evaluate a version on the agent's suite, and publish a version
(through the suite when the agent has one: the version's evaluation page then shows its
progress and what became of it)."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async as sync_to_async
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from chat import access
from chat.access import AgentAction
from chat.evals import lifecycle
from chat.evals.views import STOPPING
from chat.models import AgentVersion
from chat.runs import tasks

from . import suites
from .exceptions import AgentRefused


def _version(user: Any, slug: str, number: int) -> AgentVersion:
    """Version `number` of an agent `user` may use; 404 otherwise (a private agent of someone
    else's is not said to exist)."""
    found = (
        AgentVersion.objects.select_related("agent__suite", "agent__published", "profile")
        .filter(agent__in=access.agents(user, AgentAction.USE), agent__slug=slug, number=number)
        .first()
    )
    if found is None:
        raise Http404("No such version.")
    return found


@login_required
@require_POST
async def version_evaluate(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    """Evaluate the version on its agent's suite, watched live on the evaluation's page."""
    user = await request.auser()

    def plan() -> suites.Planned:
        return suites.plan_evaluation(_version(user, slug, number), user=user)

    if tasks.stopping.is_set():
        await sync_to_async(messages.error)(request, STOPPING)
        return redirect("chat:agent_detail", slug)
    try:
        planned = await sync_to_async(plan)()
    except AgentRefused as exc:
        await sync_to_async(messages.error)(request, str(exc))
        return redirect("chat:agent_detail", slug)
    lifecycle.start_eval(planned.eval_run, planned.cases, planned.target, user=user)
    return redirect("chat:evals:run", planned.eval_run.pk)


@login_required
@require_POST
async def version_publish(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    """Publish the version: at once without a suite; with one, after its evaluation, on the
    evaluation's page."""
    user = await request.auser()

    def plan() -> tuple[AgentVersion, suites.Publishing | None]:
        version = _version(user, slug, number)
        return version, suites.publish_or_plan(version, user=user)

    if tasks.stopping.is_set():
        await sync_to_async(messages.error)(request, STOPPING)
        return redirect("chat:agent_detail", slug)
    try:
        version, publishing = await sync_to_async(plan)()
    except AgentRefused as exc:
        await sync_to_async(messages.error)(request, str(exc))
        return redirect("chat:agent_detail", slug)
    if publishing is None:
        await sync_to_async(messages.success)(request, f"Published {version}.")
        return redirect("chat:agent_detail", slug)
    suites.start_publication(publishing, user=user)
    return redirect("chat:evals:run", publishing.candidate.eval_run.pk)
