"""Pages. Every view requires login and reaches a conversation through `chat.access`: its
owner does everything; a teammate reads (and annotates) a shared one; anyone else gets 404."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.middleware import HtmxDetails

from chat import access, agent, agents, inspector, media, news, picker, runs, search, windows
from chat.access import Action
from chat.agents import views as agent_views
from chat.attachment_views import first_message
from chat.forms import ToolForkForm
from chat.models import Conversation, Message, ToolCall
from chat.settings_panel import AgentSettings
from chat.templatetags.chat_tags import pretty
from chat.transcripts import forks


class AuthenticatedRequest(HttpRequest):
    """A request past login_required, with django-htmx's details (for the type checker)."""

    user: User
    htmx: HtmxDetails


@login_required
def conversation_list(request: AuthenticatedRequest) -> HttpResponse:
    """The latest conversation of the list (not an archived one, nor one never begun); the
    first screen when there is none."""
    latest = search.searched(request.user).first()
    if latest is not None:
        return redirect("chat:conversation_detail", latest.pk)
    return _first_screen(request)


@login_required
@require_POST
async def conversation_create(request: AuthenticatedRequest) -> HttpResponse:
    """A new conversation. With a message (the first screen's composer), its first run starts
    at once; a message that cannot be sent comes back with the reason, nothing made.

    Async so the run is a task of the server's event loop: it outlives this request.
    """
    content: str | None = await sync_to_async(lambda: request.POST.get("message"))()
    chosen: str = await sync_to_async(lambda: request.POST.get("agent", ""))()
    user = cast(User, await request.auser())  # login_required let only a user through
    try:
        attached = await sync_to_async(first_message)(request, content)
    except runs.RunRefused as exc:
        return await sync_to_async(_first_screen)(request, content or "", str(exc))
    try:
        conversation = await sync_to_async(agent_views.started)(user, chosen)
    except agents.AgentRefused as exc:
        return await sync_to_async(_first_screen)(request, content or "", str(exc))
    if content is not None:
        try:
            await runs.start_run(
                conversation=conversation, user=user, content=content, attachments=attached
            )
        except runs.RunRefused as exc:
            # Nothing made: the first screen again, with the message and why it was not sent.
            await conversation.adelete()
            return await sync_to_async(_first_screen)(request, content, str(exc))
    return redirect("chat:conversation_detail", conversation.pk)


def _first_screen(
    request: AuthenticatedRequest, content: str = "", notice: str = "", status: int = 200
) -> HttpResponse:
    """The page of a user with no conversation yet: the composer, ready for a first message."""
    return render(
        request,
        "chat/empty.html",
        {
            "content": content,
            "notice": notice,
            "max_message_chars": settings.AGENTLAB_MAX_MESSAGE_CHARS,
            "scripted": runs.endpoint().scripted,
        },
        status=422 if notice else status,
    )


@login_required
def conversation_detail(request: AuthenticatedRequest, pk: int) -> HttpResponse:
    conversation = access.conversation(
        request.user,
        Action.READ,
        pk,
        Conversation.objects.select_related("owner", "agent_version__agent"),
    )
    replay = inspector.replay_page(conversation)
    if replay is not None:
        return redirect(replay)
    news.seen(request.user, conversation)
    return render(
        request,
        "chat/conversation.html",
        {
            "conversation": conversation,
            **windows.page(conversation, request.GET),
            "read_only": not access.may(request.user, Action.WRITE, conversation),
            "model_choice": picker.ModelChoice.of(conversation),
            "max_message_chars": settings.AGENTLAB_MAX_MESSAGE_CHARS,
            **agent_views.shown_agent(conversation),
        },
    )


@login_required
def conversation_settings(request: AuthenticatedRequest, pk: int) -> HttpResponse:
    conversation = access.conversation(request.user, Action.CONFIGURE, pk)
    data = request.POST if request.method == "POST" else None
    panel = AgentSettings(conversation, data, user=request.user)
    saved = False
    if request.method == "POST" and not panel.editing and panel.is_valid():  # Add…: no save
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
            "panel": panel,
            "saved": saved,
        },
        status=422 if request.method == "POST" and not saved and not panel.editing else 200,
    )


@login_required
@require_POST
def conversation_rename(request: AuthenticatedRequest, pk: int) -> HttpResponse:
    conversation = access.conversation(request.user, Action.CONFIGURE, pk)
    title = " ".join(request.POST.get("title", "").split())[:200]
    if title:
        conversation.title = title
        conversation.save(update_fields=["title"])  # not updated_at: it keeps its place
    return redirect("chat:conversation_detail", conversation.pk)


@login_required
@require_POST
def conversation_share(request: AuthenticatedRequest, pk: int) -> HttpResponse:
    """Share with the team (read-only for them), or take it back: their open pages lose it at
    once."""
    conversation = access.conversation(request.user, Action.CONFIGURE, pk)
    shared = request.POST.get("shared") == "on"
    if shared != conversation.shared:
        conversation.shared = shared
        conversation.save(update_fields=["shared"])  # not updated_at: it keeps its place
        if not shared:
            layer = get_channel_layer()
            if layer is not None:
                async_to_sync(layer.group_send)(conversation.group_name, {"type": "chat.unshared"})
        messages.success(
            request,
            "Shared with the team: everyone logged in can read it."
            if shared
            else "No longer shared: only you can open it.",
        )
    return redirect("chat:conversation_detail", conversation.pk)


@login_required
@require_POST
def conversation_delete(request: AuthenticatedRequest, pk: int) -> HttpResponseRedirect:
    conversation = access.conversation(request.user, Action.CONFIGURE, pk)
    if conversation.has_unfinished_run():
        messages.error(request, "A run is in progress: stop it before deleting the conversation.")
        return redirect("chat:conversation_detail", conversation.pk)
    conversation.delete()
    messages.success(request, f"Deleted “{conversation}”.")
    return redirect("chat:conversation_list")


@login_required
def run_inspect(request: AuthenticatedRequest, pk: int, run_pk: int) -> HttpResponse:
    """The wire inspector of one run, loaded when its "Inspect" toggle opens."""
    conversation = access.conversation(request.user, Action.READ, pk)
    run = get_object_or_404(conversation.runs, pk=run_pk)
    steps = inspector.steps(run)
    context = {
        "run": run,
        "steps": steps,
        "max_steps": inspector.max_steps(run),
        "waterfall": inspector.picture(run, steps),
    }
    return render(request, "chat/conversation.html#inspector", context)


@login_required
def tool_call_detail(request: AuthenticatedRequest, pk: int, tool_call_pk: int) -> HttpResponse:
    """One tool call's arguments, result, status and reason, where its pill was opened."""
    conversation = access.conversation(request.user, Action.READ, pk)
    call = get_object_or_404(
        ToolCall.objects.select_related("run"), pk=tool_call_pk, run__conversation=conversation
    )
    context = {"call": call, "media": media.for_call(call)}
    return render(request, "chat/conversation.html#tool-detail", context)


@login_required
def message_text(request: AuthenticatedRequest, pk: int, index: int) -> HttpResponse:
    """A message's whole content as plain text: where the page's folded-note links."""
    conversation = access.conversation(request.user, Action.READ, pk)
    message = get_object_or_404(conversation.messages.active(), index=index)
    return HttpResponse(message.content or "", content_type="text/plain; charset=utf-8")


@login_required
def reply_text(request: AuthenticatedRequest, pk: int, index: int) -> HttpResponse:
    """A reply's raw Markdown, as the Copy button takes it: the assistant messages from message
    `index` up to the next user message, as the page joins them."""
    conversation = access.conversation(request.user, Action.READ, pk)
    rows = list(conversation.messages.active().filter(index__gte=index))
    if not rows or rows[0].index != index or rows[0].role != Message.Role.ASSISTANT:
        raise Http404("No reply starts at this message.")
    texts = []
    for row in rows:
        if row.role == Message.Role.USER:
            break
        if row.role == Message.Role.ASSISTANT and row.content:
            texts.append(row.content)
    return HttpResponse("\n\n".join(texts), content_type="text/plain; charset=utf-8")


# Forks: copy a conversation up to a message, or edit a tool result and continue from it.


@dataclass
class Preview:
    """The last message a fork copies, described for the confirm page."""

    message: Message
    names: dict[str, str]

    @property
    def role(self) -> str:
        return self.message.get_role_display()

    @property
    def tools(self) -> list[str]:
        return [agent.ToolCall.from_openai(c).name for c in self.message.tool_calls]

    @property
    def answers(self) -> str:
        return agent.humanize(self.names.get(self.message.tool_call_id, "unknown tool"))


def _status(exc: ValueError) -> int:
    return 409 if isinstance(exc, forks.RunInProgress) else 422


def _page(
    request: HttpRequest, conversation: Conversation, context: dict[str, Any], status: int
) -> HttpResponse:
    running = conversation.has_unfinished_run()
    return render(
        request,
        "chat/fork.html",
        {
            "conversation": conversation,
            "running": running,
            **context,
            # A teammate forks a shared conversation too: its sidebar offers them no renaming.
            "read_only": not access.may(request.user, Action.CONFIGURE, conversation),
        },
        status=status,
    )


@login_required
@require_http_methods(["GET", "POST"])
def fork_message(request: AuthenticatedRequest, pk: int, index: int) -> HttpResponse:
    """Confirm, then copy the conversation through message `index` (and the rest of its round)."""
    conversation = access.conversation(request.user, Action.COPY, pk)
    rows = list(conversation.messages.active())
    if not any(row.index == index for row in rows):
        raise Http404("No such message in this conversation.")
    error, status = "", 200
    if request.method == "POST":
        try:
            fork = forks.fork_conversation(conversation, owner=request.user, at_message=index)
        except ValueError as exc:
            error, status = str(exc), _status(exc)
        else:
            return redirect("chat:conversation_detail", fork.pk)
    end = forks.fork_end(rows, index)
    names = {
        call.id: call.name
        for row in rows
        for call in (agent.ToolCall.from_openai(value) for value in row.tool_calls or ())
    }
    last = next(row for row in rows if row.index == end)
    return _page(
        request,
        conversation,
        {
            "index": index,
            "end": end,
            "copied": sum(1 for row in rows if row.index <= end),
            "preview": Preview(last, names),
            "error": error,
        },
        status,
    )


def _tool_call(conversation: Conversation, tool_call_pk: int) -> tuple[ToolCall, Message]:
    call = get_object_or_404(
        ToolCall.objects.select_related("message"),
        pk=tool_call_pk,
        run__conversation=conversation,
        message__conversation=conversation,
    )
    if call.message is None:  # the filter above rules it out; this tells the type checker
        raise Http404("This tool call is not linked to a message.")
    reply = (
        conversation.messages.active()
        .filter(role=Message.Role.TOOL, tool_call_id=call.call_id, index__gt=call.message.index)
        .order_by("index")
        .first()
    )
    if reply is None:
        raise Http404("This tool call has no reply to edit.")
    return call, reply


def _tool_fork(
    request: AuthenticatedRequest, pk: int, tool_call_pk: int
) -> HttpResponse | Conversation:
    """The page, or the fork made from a valid POST (its run is not started yet)."""
    conversation = access.conversation(request.user, Action.COPY, pk)
    call, reply = _tool_call(conversation, tool_call_pk)
    current = reply.content or ""
    status = 200
    if request.method == "POST":
        form = ToolForkForm(request.POST)
        status = 422
        if form.is_valid():
            text = form.cleaned_data["result"].replace("\r\n", "\n")
            failed = form.cleaned_data["failed"]
            try:
                return forks.fork_conversation(
                    conversation,
                    owner=request.user,
                    at_message=reply.index,
                    tool_result=None if failed and text == current else text,
                    tool_failed=failed,
                    tool_call_id=call.call_id,
                )
            except ValueError as exc:
                form.add_error(None, str(exc))
                status = _status(exc)
    else:
        form = ToolForkForm(initial={"result": current})
    return _page(
        request,
        conversation,
        {"call": call, "arguments": pretty(call.arguments), "current": current, "form": form},
        status,
    )


@login_required
@require_http_methods(["GET", "POST"])
async def fork_tool_call(request: AuthenticatedRequest, pk: int, tool_call_pk: int) -> HttpResponse:
    """Edit a tool result (or mark it failed), fork, and continue the loop in the fork.

    Async so the continuation run is a task of the server's event loop: it outlives this
    request, and the fork's page picks it up over the WebSocket.
    """
    outcome = await sync_to_async(_tool_fork)(request, pk, tool_call_pk)
    if isinstance(outcome, HttpResponse):
        return outcome
    try:
        await runs.start_run(conversation=outcome, user=await request.auser(), content=None)
    except runs.RunRefused as exc:
        await sync_to_async(messages.error)(
            request, f"The fork was made, but its run did not start: {exc}"
        )
    return redirect("chat:conversation_detail", outcome.pk)
