"""Pages. Every view requires login and reaches conversations through for_user()."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from chat import inspector, runs
from chat.forms import AgentSettings
from chat.fragments import conversation_turns
from chat.models import Conversation, RunStatus


def _conversation(request: HttpRequest, pk: int) -> Conversation:
    return get_object_or_404(Conversation.objects.for_user(request.user), pk=pk)


@login_required
def conversation_list(request: HttpRequest) -> HttpResponse:
    latest = Conversation.objects.for_user(request.user).first()
    if latest is not None:
        return redirect("chat:conversation_detail", latest.pk)
    return render(
        request,
        "chat/empty.html",
        {"conversations": Conversation.objects.none()},
    )


@login_required
@require_POST
def conversation_create(request: HttpRequest) -> HttpResponse:
    conversation = Conversation(owner=request.user)
    conversation.set_agent_parameters(runs.default_parameters())
    conversation.save()
    return redirect("chat:conversation_detail", conversation.pk)


@login_required
def conversation_detail(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = _conversation(request, pk)
    turns = conversation_turns(conversation)
    return render(
        request,
        "chat/conversation.html",
        {
            "conversation": conversation,
            "conversations": Conversation.objects.for_user(request.user),
            "turns": turns,
            "running": any(turn.is_active for turn in turns),
            "live_run": next((t.run.pk for t in turns if t.is_active and t.run), None),
            "model_label": _model_label(conversation),
            "max_message_chars": settings.AGENTLAB_MAX_MESSAGE_CHARS,
        },
    )


@login_required
def conversation_settings(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = _conversation(request, pk)
    panel = AgentSettings(conversation, request.POST if request.method == "POST" else None)
    saved = False
    if request.method == "POST" and panel.is_valid():
        panel.save()
        saved = True
        if not request.htmx:
            return redirect("chat:conversation_detail", conversation.pk)
    template = "chat/settings.html#panel" if request.htmx else "chat/settings.html"
    return render(
        request,
        template,
        {
            "conversation": conversation,
            "conversations": Conversation.objects.for_user(request.user),
            "panel": panel,
            "saved": saved,
        },
        status=422 if request.method == "POST" and not saved else 200,
    )


@login_required
@require_POST
def conversation_rename(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = _conversation(request, pk)
    title = " ".join(request.POST.get("title", "").split())[:200]
    if title:
        conversation.title = title
        conversation.save(update_fields=["title", "updated_at"])
    return redirect("chat:conversation_detail", conversation.pk)


@login_required
@require_POST
def conversation_delete(request: HttpRequest, pk: int) -> HttpResponseRedirect:
    conversation = _conversation(request, pk)
    if conversation.runs.filter(status=RunStatus.IN_PROGRESS).exists():
        messages.error(request, "A run is in progress: stop it before deleting the conversation.")
        return redirect("chat:conversation_detail", conversation.pk)
    conversation.delete()
    messages.success(request, f"Deleted “{conversation}”.")
    return redirect("chat:conversation_list")


@login_required
def run_inspect(request: HttpRequest, pk: int, run_pk: int) -> HttpResponse:
    """The wire inspector of one run, loaded when its "Inspect" toggle opens."""
    conversation = _conversation(request, pk)
    run = get_object_or_404(conversation.runs, pk=run_pk)
    return render(
        request,
        "chat/conversation.html#inspector",
        {"run": run, "steps": inspector.steps(run), "max_steps": inspector.max_steps(run)},
    )


def _model_label(conversation: Conversation) -> str:
    model = conversation.agent_parameters().model
    if conversation.profile is not None:
        return model or conversation.profile.model
    if settings.OPENAI_BASE_URL:
        return model or settings.AGENTLAB_MODEL or "model not set"
    from chat.agent.scripted import SCRIPTED_LABEL

    return SCRIPTED_LABEL
