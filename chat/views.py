from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from chat.models import Conversation


@login_required
def conversation_list(request: HttpRequest) -> HttpResponse:
    conversations = Conversation.objects.for_user(request.user)
    return render(request, "chat/conversation_list.html", {"conversations": conversations})


@login_required
def conversation_detail(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = get_object_or_404(Conversation.objects.for_user(request.user), pk=pk)
    messages = conversation.messages.order_by("index")
    runs = conversation.runs.prefetch_related("tool_calls")
    return render(
        request,
        "chat/conversation.html",
        {"conversation": conversation, "messages": messages, "runs": runs},
    )
