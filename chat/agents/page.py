"""An agent's page: its suite, and its versions newest first, each with what changed from the
one before, the conversations that used it, the team's marks on its replies and its
evaluations. However many versions and conversations, the page reads a fixed number of queries:
one per kind of fact, grouped by version."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, F, Q, Window
from django.db.models.functions import RowNumber
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from chat import access
from chat.access import Action, AgentAction
from chat.models import (
    Agent,
    AgentVersion,
    Annotation,
    CaseSet,
    Conversation,
    ConversationQuerySet,
    EvalRun,
    Verdict,
)

from .differences import Difference, difference
from .policies import ToolPolicy, known, tool_policies

RECENT_CONVERSATIONS = 3
"""Conversations listed per version (the readable ones, most recently active first)."""
RECENT_EVALUATIONS = 3
"""Evaluations listed per version, latest first."""


@dataclass(frozen=True)
class Marks:
    """The team's Good and Bad on a version's replies and on their tool calls."""

    good_replies: int = 0
    bad_replies: int = 0
    good_calls: int = 0
    bad_calls: int = 0

    @property
    def good(self) -> int:
        return self.good_replies + self.good_calls

    @property
    def bad(self) -> int:
        return self.bad_replies + self.bad_calls

    @property
    def any(self) -> bool:
        return bool(self.good or self.bad)


@dataclass(frozen=True)
class VersionRow:
    """A version on its agent's page: what changed from the one before it (None: the first),
    its tools and their policies, how many conversations started from it and the latest the
    viewer may read, the team's marks, and its latest evaluations (of `evaluation_count`)."""

    version: AgentVersion
    changes: Difference | None
    tools: tuple[ToolPolicy, ...] = ()
    conversation_count: int = 0
    conversations: tuple[Conversation, ...] = ()
    marks: Marks = field(default_factory=Marks)
    evaluations: tuple[EvalRun, ...] = ()
    evaluation_count: int = 0

    @property
    def unused(self) -> bool:
        """No conversation, mark or evaluation yet: the page says so in one line."""
        return not (self.conversation_count or self.marks.any or self.evaluation_count)


class CaseSetChoice(forms.ModelChoiceField[CaseSet]):
    def label_from_instance(self, obj: CaseSet) -> str:
        cases = getattr(obj, "n_cases", 0)
        return f"{obj.name} ({cases} case{'' if cases == 1 else 's'})"


class SuiteForm(forms.Form):
    """The suite an agent's versions are evaluated on, and whether publishing must pass it."""

    suite = CaseSetChoice(
        queryset=CaseSet.objects.annotate(n_cases=Count("cases")).order_by("name"),
        required=False,
        empty_label="No suite",
        label="Suite",
        error_messages={"invalid_choice": "That case set no longer exists: choose another."},
    )
    require_suite_pass = forms.BooleanField(
        required=False,
        label="New versions must pass at least as many cases as the published one",
    )


@login_required
@require_GET
def agent_detail(request: HttpRequest, slug: str) -> HttpResponse:
    """An agent's suite and its versions, newest first."""
    agent = get_object_or_404(
        access.agents(request.user, AgentAction.USE).select_related("owner", "suite"), slug=slug
    )
    versions = list(agent.versions.select_related("author", "profile").order_by("number"))
    for version in versions:
        version.agent = agent
    can_change = not access.agent_denied(request.user, AgentAction.CHANGE, agent)
    context = {
        "agent": agent,
        "rows": version_rows(agent, versions, request.user)[::-1],
        "suite_cases": agent.suite.cases.count() if agent.suite else 0,
        "can_change": can_change,
        "suite_form": (
            SuiteForm(
                initial={"suite": agent.suite_id, "require_suite_pass": agent.require_suite_pass}
            )
            if can_change
            else None
        ),
    }
    return render(request, "chat/agents/detail.html", context)


@login_required
@require_POST
def agent_suite(request: HttpRequest, slug: str) -> HttpResponseRedirect:
    """Attach, replace or detach the agent's suite, and whether new versions must pass it."""
    agent = get_object_or_404(access.agents(request.user, AgentAction.USE), slug=slug)
    back = HttpResponseRedirect(reverse("chat:agent_detail", args=[agent.slug]) + "#suite")
    if refused := access.agent_denied(request.user, AgentAction.CHANGE, agent):
        messages.error(request, refused)
        return back
    form = SuiteForm(request.POST)
    if not form.is_valid():
        messages.error(request, next(iter(form.errors.as_data().values()))[0].messages[0])
        return back
    agent.suite = form.cleaned_data["suite"]
    agent.require_suite_pass = form.cleaned_data["require_suite_pass"]
    agent.save(update_fields=["suite", "require_suite_pass", "updated_at"])
    messages.success(request, suite_saved(agent))
    return back


def suite_saved(agent: Agent) -> str:
    """What the success message says of the agent's suite now."""
    if agent.suite is None:
        return f"{agent.name} has no suite now."
    gate = (
        "new versions must pass at least as many cases as the published one"
        if agent.require_suite_pass
        else "new versions are published whatever they pass"
    )
    return f"{agent.name} is evaluated on “{agent.suite.name}”: {gate}."


def version_rows(agent: Agent, versions: list[AgentVersion], user: Any) -> list[VersionRow]:
    """The versions in order, each with its facts: six queries at most for all of them."""
    counts = conversation_counts(agent)
    shown = recent_conversations(agent, user)
    marks = marks_by_version(agent)
    evaluations, evaluation_counts = latest_evaluations(agent)
    parameters = [version.agent_parameters() for version in versions]
    tools = known(parameters)
    return [
        VersionRow(
            version,
            difference(versions[n - 1], version, defaults=tools.defaults) if n else None,
            tools=tool_policies(parameters[n], tools),
            conversation_count=counts.get(version.pk, 0),
            conversations=tuple(shown[version.pk]),
            marks=marks.get(version.pk, Marks()),
            evaluations=tuple(evaluations[version.pk]),
            evaluation_count=evaluation_counts.get(version.pk, 0),
        )
        for n, version in enumerate(versions)
    ]


def _chats(agent: Agent) -> ConversationQuerySet:
    """The conversations people had from the agent's versions (not evaluations' replays)."""
    return Conversation.objects.chats().filter(agent_version__agent=agent)


def conversation_counts(agent: Agent) -> dict[int, int]:
    """How many conversations started from each version, whoever's they are."""
    grouped = _chats(agent).order_by().values("agent_version").annotate(n=Count("pk"))
    return {row["agent_version"]: row["n"] for row in grouped}


def recent_conversations(agent: Agent, user: Any) -> defaultdict[int, list[Conversation]]:
    """Per version, the conversations `user` may read, most recently active first."""
    place = Window(
        RowNumber(),
        partition_by=F("agent_version"),
        order_by=[F("updated_at").desc(), F("pk").desc()],
    )
    found = (
        access.conversations(user, Action.READ, _chats(agent))
        .only("pk", "title", "updated_at", "agent_version_id")
        .annotate(place=place)
        .filter(place__lte=RECENT_CONVERSATIONS)
        .order_by("agent_version", "place")
    )
    return _grouped(found, "agent_version_id")


def marks_by_version(agent: Agent) -> dict[int, Marks]:
    """The team's Good and Bad on each version's replies and tool calls, in its conversations."""
    on_reply, on_call = Q(tool_call__isnull=True), Q(tool_call__isnull=False)
    good, bad = Q(verdict=Verdict.GOOD), Q(verdict=Verdict.BAD)
    version = "run__conversation__agent_version"
    grouped = (
        Annotation.objects.filter(run__conversation__in=_chats(agent))
        .order_by()
        .values(version)
        .annotate(
            good_replies=Count("pk", filter=good & on_reply),
            bad_replies=Count("pk", filter=bad & on_reply),
            good_calls=Count("pk", filter=good & on_call),
            bad_calls=Count("pk", filter=bad & on_call),
        )
    )
    return {
        row[version]: Marks(
            row["good_replies"], row["bad_replies"], row["good_calls"], row["bad_calls"]
        )
        for row in grouped
    }


def latest_evaluations(
    agent: Agent,
) -> tuple[defaultdict[int, list[EvalRun]], dict[int, int]]:
    """Per version, its latest evaluations, and how many it has in all."""
    by_version = F("agent_version")
    found = (
        EvalRun.objects.filter(agent_version__agent=agent)
        .only(
            "pk",
            "agent_version_id",
            "set_name",
            "label",
            "status",
            "total",
            "passed",
            "failed",
            "started_at",
        )
        .annotate(
            place=Window(
                RowNumber(),
                partition_by=by_version,
                order_by=[F("started_at").desc(), F("pk").desc()],
            ),
            of=Window(Count("pk"), partition_by=by_version),
        )
        .filter(place__lte=RECENT_EVALUATIONS)
        .order_by("agent_version", "place")
    )
    grouped = _grouped(found, "agent_version_id")
    return grouped, {pk: getattr(runs[0], "of", 0) for pk, runs in grouped.items()}


def _grouped(rows: Iterable[Any], key: str) -> defaultdict[int, list[Any]]:
    grouped: defaultdict[int, list[Any]] = defaultdict(list)
    for row in rows:
        grouped[getattr(row, key)].append(row)
    return grouped
