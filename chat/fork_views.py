"""Fork pages: copy a conversation up to a message, or edit a tool result and continue from it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from chat import agent, forks, runs
from chat.models import Conversation, Message, RunStatus, ToolCall


class ToolForkForm(forms.Form):
    result = forms.CharField(
        required=False,
        strip=False,
        max_length=forks.MAX_TOOL_RESULT_CHARS,
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false"}),
        label="Result the model sees",
        error_messages={
            "max_length": "The result is too long: %(show_value)s characters "
            "(the limit is %(limit_value)s)."
        },
    )
    failed = forms.BooleanField(
        required=False,
        label="Mark as failed",
        help_text='The model gets {"error": <the text above>}. Leave the text unchanged to say '
        "only that the call was marked failed by the user.",
    )


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
        return [agent.humanize(agent.ToolCall.from_openai(c).name) for c in self.message.tool_calls]

    @property
    def answers(self) -> str:
        return agent.humanize(self.names.get(self.message.tool_call_id, "unknown tool"))


def _conversation(request: HttpRequest, pk: int) -> Conversation:
    return get_object_or_404(Conversation.objects.for_user(request.user), pk=pk)


def _running(conversation: Conversation) -> bool:
    return conversation.runs.filter(status=RunStatus.IN_PROGRESS).exists()


def _status(exc: ValueError) -> int:
    return 409 if isinstance(exc, forks.RunInProgress) else 422


def _page(
    request: HttpRequest, conversation: Conversation, context: dict[str, Any], status: int
) -> HttpResponse:
    running = _running(conversation)
    return render(
        request,
        "chat/fork.html",
        {
            "conversation": conversation,
            "conversations": Conversation.objects.for_user(request.user),
            "running": running,
            **context,
        },
        status=status,
    )


@login_required
@require_http_methods(["GET", "POST"])
def fork_message(request: HttpRequest, pk: int, index: int) -> HttpResponse:
    """Confirm, then copy the conversation through message `index` (and the rest of its round)."""
    conversation = _conversation(request, pk)
    rows = list(conversation.messages.order_by("index"))
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
        conversation.messages.filter(
            role=Message.Role.TOOL, tool_call_id=call.call_id, index__gt=call.message.index
        )
        .order_by("index")
        .first()
    )
    if reply is None:
        raise Http404("This tool call has no reply to edit.")
    return call, reply


def _pretty(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def _tool_fork(request: HttpRequest, pk: int, tool_call_pk: int) -> HttpResponse | Conversation:
    """The page, or the fork made from a valid POST (its run is not started yet)."""
    conversation = _conversation(request, pk)
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
        {"call": call, "arguments": _pretty(call.arguments), "current": current, "form": form},
        status,
    )


@login_required
@require_http_methods(["GET", "POST"])
async def fork_tool_call(request: HttpRequest, pk: int, tool_call_pk: int) -> HttpResponse:
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
