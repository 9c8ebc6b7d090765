"""The Evaluations pages: case sets, evaluations (started here as tasks of the server, watched
live over a socket), and comparisons of two or three targets on the same cases.

Everything here is the team's: every logged-in user sees every case set, evaluation and
comparison, and may start one. Stop belongs to whoever started the evaluation (and to staff),
as a shared conversation's run belongs to its owner.

A target is never a URL typed here (chat/evals/forms.py): a key only ever goes to its own
endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from asgiref.sync import sync_to_async
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Count, OuterRef, Subquery
from django.http import Http404, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from chat import access
from chat.access import AgentAction
from chat.agent import decisions
from chat.evals import cases, compare, lifecycle, replay, tables
from chat.evals.forms import CompareForm, RunForm, agent_comparison, remembered_case_set
from chat.models import Case, CaseSet, Comparison, Conversation, EvalRun
from chat.runs import RunRefused, tasks

if TYPE_CHECKING:
    from chat.views import AuthenticatedRequest

RECENT = 50
STOPPING = "The server is restarting: start the evaluation again in a moment."


# The Evaluations page: case sets, recent evaluations, and the Run form.


@dataclass(frozen=True)
class SetRow:
    case_set: CaseSet
    cases: int
    last: EvalRun | None

    @property
    def tally(self) -> compare.Tally | None:
        return compare.Tally.of(self.last) if self.last else None


def set_rows() -> list[SetRow]:
    """Every case set with its number of cases and its latest evaluation."""
    latest = EvalRun.objects.filter(case_set=OuterRef("pk")).order_by("-started_at", "-pk")
    counted = CaseSet.objects.annotate(
        n=Count("cases"), last_id=Subquery(latest.values("pk")[:1])
    ).values_list("pk", "n", "last_id")
    facts = {pk: (n, last_id) for pk, n, last_id in counted}
    last = EvalRun.objects.in_bulk([last_id for _, last_id in facts.values() if last_id])
    return [
        SetRow(case_set, facts[case_set.pk][0], last.get(facts[case_set.pk][1] or 0))
        for case_set in CaseSet.objects.order_by("name")
    ]


@dataclass(frozen=True)
class RunRow:
    run: EvalRun

    @property
    def tally(self) -> compare.Tally:
        return compare.Tally.of(self.run)


def recent_runs(case_set: CaseSet | None = None) -> list[RunRow]:
    """The latest evaluations (of one set), newest first."""
    found = EvalRun.objects.select_related("case_set", "started_by", "comparison")
    if case_set is not None:
        found = found.filter(case_set=case_set)
    return [RunRow(run) for run in found[:RECENT]]


def _index(
    request: AuthenticatedRequest, form: RunForm | None = None, status: int = 200
) -> HttpResponse:
    if form is None:
        chosen = request.GET.get("set", "")
        form = RunForm(
            user=request.user, initial={"case_set": chosen} if chosen.isdigit() else None
        )
    context = {"form": form, "sets": set_rows(), "runs": recent_runs()}
    return render(request, "chat/evals/index.html", context, status=status)


@dataclass(frozen=True)
class Started:
    eval_run: EvalRun
    cases: list[Case]
    target: replay.Target


def _checked_run(request: AuthenticatedRequest) -> HttpResponse | Started:
    """The evaluation a valid POST asks for, created; else the page with its one error (422)."""
    form = RunForm(request.POST, user=request.user)
    if form.is_valid():
        targets = form.chosen()
        case_set: CaseSet = form.cleaned_data["case_set"]
        replayed = list(case_set.cases.order_by("pk"))
        if tasks.stopping.is_set():
            form.add_error(None, STOPPING)
        elif not replayed:
            form.add_error("case_set", f"The set “{case_set}” has no cases to replay.")
        elif targets:
            try:
                eval_run = replay.create_eval_run(
                    replayed,
                    targets[0],
                    user=request.user,
                    case_set=case_set,
                    repeat=form.cleaned_data["repeat"],
                    continue_loop=form.cleaned_data["continue_loop"],
                )
            except RunRefused as exc:
                form.add_error(None, str(exc))
            else:
                return Started(eval_run, replayed, targets[0])
    return _index(request, form, status=422)


@login_required
@require_http_methods(["GET", "POST"])
async def index(request: AuthenticatedRequest) -> HttpResponse:
    """The Evaluations page; its Run form starts an evaluation as a task of the server (not
    tied to this request) and goes to the evaluation's page, where it is watched live."""
    if request.method != "POST":
        return await sync_to_async(_index)(request)
    outcome = await sync_to_async(_checked_run)(request)
    if isinstance(outcome, HttpResponse):
        return outcome
    user = cast(User, await request.auser())
    lifecycle.start_eval(outcome.eval_run, outcome.cases, outcome.target, user=user)
    return redirect("chat:evals:run", outcome.eval_run.pk)


@login_required
def case_set_detail(request: AuthenticatedRequest, pk: int) -> HttpResponse:
    case_set = get_object_or_404(CaseSet, pk=pk)
    kept = list(case_set.cases.order_by("pk"))
    sources = {case.conversation_id for case in kept if case.conversation_id}
    readable = set(
        access.conversations(request.user, access.Action.READ)
        .filter(pk__in=sources)
        .values_list("pk", flat=True)
    )
    context = {
        "case_set": case_set,
        "cases": kept,
        "readable": readable,
        "runs": recent_runs(case_set),
    }
    return render(request, "chat/evals/set.html", context)


@login_required
def eval_run_detail(request: AuthenticatedRequest, pk: int) -> HttpResponse:
    eval_run = get_object_or_404(
        EvalRun.objects.select_related(
            "case_set",
            "started_by",
            "comparison",
            "agent_version__agent",
            "baseline__agent_version",
        ),
        pk=pk,
    )
    shown = tables.table(eval_run)
    context = {
        "eval_run": eval_run,
        "table": shown,
        "tally": shown.tally,
        "rule": decisions.RULE,
        "can_stop": eval_run.is_active and access.may_stop(request.user, eval_run.started_by_id),
    }
    return render(request, "chat/evals/run.html", context)


@login_required
@require_POST
async def eval_run_stop(request: AuthenticatedRequest, pk: int) -> HttpResponse:
    """Stop an evaluation in whichever process replays it; what was done stays."""
    eval_run = await EvalRun.objects.filter(pk=pk).afirst()
    if eval_run is None:
        raise Http404("No such evaluation.")
    user = await request.auser()
    if not access.may_stop(user, eval_run.started_by_id):
        return HttpResponseForbidden("Only whoever started an evaluation (or staff) stops it.")
    if eval_run.is_active:
        await lifecycle.request_stop(eval_run.pk)
        await sync_to_async(messages.info)(request, "Stopping: what was done stays.")
    return redirect("chat:evals:run", eval_run.pk)


# Compare: the same cases on two or three targets.


def _compare_page(
    request: AuthenticatedRequest,
    form: CompareForm | None = None,
    conversation: Conversation | None = None,
    status: int = 200,
) -> HttpResponse:
    if form is None:
        initial = _agent_initial(request, request.GET.get("agent", ""))
        chosen = request.GET.get("set", "")
        if chosen.isdigit():
            initial["case_set"] = chosen
        elif "case_set" not in initial:
            initial["case_set"] = remembered_case_set(request.user)
        form = CompareForm(user=request.user, conversation=conversation, initial=initial)
    comparisons = Comparison.objects.select_related("created_by")[:RECENT]
    context = {"form": form, "conversation": conversation, "comparisons": comparisons}
    return render(request, "chat/evals/compare.html", context, status=status)


def _agent_initial(request: AuthenticatedRequest, slug: str) -> dict[str, Any]:
    """`?agent=<slug>`: the agent's published and newest other versions on its suite, each
    thing left to choose said in a line; an agent the user may not use is one line too."""
    if not slug:
        return {}
    found = access.agents(request.user, AgentAction.USE).filter(slug=slug).first()
    if found is None:
        messages.error(request, f"No agent “{slug[:100]}” that you may use.")
        return {}
    initial, lines = agent_comparison(request.user, found)
    for line in lines:
        messages.info(request, line)
    return initial


def _source(request: AuthenticatedRequest, value: str) -> Conversation | None:
    """The conversation a comparison takes its last turn from: one the user may read."""
    if not value:
        return None
    if not value.isdigit():
        raise Http404("No such conversation.")
    return access.conversation(request.user, access.Action.READ, int(value))


@dataclass(frozen=True)
class Compared:
    comparison: Comparison
    eval_runs: list[EvalRun]
    targets: list[replay.Target]
    cases: list[Case]


def _checked_comparison(request: AuthenticatedRequest) -> HttpResponse | Compared:
    conversation = _source(request, request.POST.get("conversation", ""))
    form = CompareForm(request.POST, user=request.user, conversation=conversation)
    if form.is_valid():
        targets = form.chosen()
        if tasks.stopping.is_set():
            form.add_error(None, STOPPING)
        elif len(targets) >= 2:
            try:
                with transaction.atomic():
                    if conversation is not None:
                        case = compare.last_turn_case(conversation, user=request.user)
                        case_set, replayed = case.case_set, [case]
                    else:
                        case_set = form.cleaned_data["case_set"]
                        replayed = list(case_set.cases.order_by("pk"))
                        if not replayed:
                            raise RunRefused(f"The set “{case_set}” has no cases to replay.")
                    comparison, eval_runs = compare.create_comparison(
                        replayed,
                        targets,
                        user=request.user,
                        case_set=case_set,
                        repeat=form.cleaned_data["repeat"],
                    )
            except (RunRefused, cases.CaseRefused) as exc:
                form.add_error(None, str(exc))
            else:
                return Compared(comparison, eval_runs, targets, replayed)
    return _compare_page(request, form, conversation, status=422)


@login_required
@require_http_methods(["GET", "POST"])
async def compare_start(request: AuthenticatedRequest) -> HttpResponse:
    """The Compare form (`?conversation=ID`: that conversation's last turn, `?set=ID`: a set
    chosen, `?agent=SLUG`: the agent's published and newest other versions on its suite);
    posted, the targets replay at once and the matrix fills in live."""
    if request.method != "POST":

        def page() -> HttpResponse:
            conversation = _source(request, request.GET.get("conversation", ""))
            return _compare_page(request, conversation=conversation)

        return await sync_to_async(page)()
    outcome = await sync_to_async(_checked_comparison)(request)
    if isinstance(outcome, HttpResponse):
        return outcome
    user = cast(User, await request.auser())
    lifecycle.start_comparison(
        outcome.comparison, outcome.eval_runs, outcome.targets, outcome.cases, user=user
    )
    return redirect("chat:evals:comparison", outcome.comparison.pk)


@login_required
def comparison_detail(request: AuthenticatedRequest, pk: int) -> HttpResponse:
    comparison = get_object_or_404(Comparison.objects.select_related("created_by"), pk=pk)
    shown = compare.matrix(comparison)
    first = shown.columns[0].eval_run if shown.columns else None
    context = {
        "comparison": comparison,
        "matrix": shown,
        "case_set": first.case_set if first else None,
        "repeat": first.repeat if first else 0,
        "rule": decisions.RULE,
        "can_stop": shown.is_active and access.may_stop(request.user, comparison.created_by_id),
    }
    return render(request, "chat/evals/comparison.html", context)


@login_required
@require_POST
async def comparison_stop(request: AuthenticatedRequest, pk: int) -> HttpResponse:
    """Stop every target of a comparison still replaying; what was done stays."""
    comparison = await Comparison.objects.filter(pk=pk).afirst()
    if comparison is None:
        raise Http404("No such comparison.")
    user = await request.auser()
    if not access.may_stop(user, comparison.created_by_id):
        return HttpResponseForbidden("Only whoever started a comparison (or staff) stops it.")
    stopped = 0
    async for eval_run in comparison.eval_runs.in_progress():
        await lifecycle.request_stop(eval_run.pk)
        stopped += 1
    if stopped:
        await sync_to_async(messages.info)(request, "Stopping: what was done stays.")
    return redirect("chat:evals:comparison", comparison.pk)
