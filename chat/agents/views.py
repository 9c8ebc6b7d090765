"""Pages of agents: the choice of agent for a new conversation, each user's default, and what
the conversation page shows of the agent it started from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from chat import access
from chat.access import Action
from chat.agent import humanize
from chat.models import Agent, AgentVersion, Configuration, Conversation

from .defaults import (
    DEFAULT,
    Offer,
    choose_default,
    default_agent,
    default_version,
    offered_to,
)
from .differences import difference
from .exceptions import AgentRefused
from .versions import find_version, start_conversation


@dataclass(frozen=True)
class Choice:
    """One agent as "New conversation" shows it: what it is called, does, and can use."""

    name: str
    description: str
    tools: tuple[str, ...]
    version: str
    is_default: bool


@login_required
@require_GET
def agent_choices(request: HttpRequest) -> HttpResponse:
    """The agents the user may start a conversation from, their default first."""
    offers = offered_to(request.user)
    stored = [offer for offer in offers if isinstance(offer, Agent)]
    published = AgentVersion.objects.in_bulk([offer.published_id for offer in stored])
    chosen = default_agent(request.user)
    choices = [_choice(offer, published, chosen) for offer in offers]
    return render(request, "chat/agents/choices.html", {"choices": choices})


@login_required
@require_POST
def agent_default(request: HttpRequest) -> HttpResponseRedirect:
    """The named agent ("Default": the built-in one) becomes the user's default."""
    try:
        version = find_version(request.user, request.POST.get("agent", ""))
        choose_default(user=request.user, agent=None if version is None else version.agent)
    except AgentRefused as exc:
        messages.error(request, str(exc))
    else:
        name = DEFAULT.name if version is None else version.agent.name
        messages.success(request, f"New conversations now start from {name}.")
    return redirect("chat:agent_choices")


def started(user: Any, chosen: str) -> Conversation:
    """A new conversation from the agent named `chosen` (its published version), or, with none
    named, from the user's default agent."""
    version = find_version(user, chosen) if chosen else default_version(user)
    return start_conversation(user=user, version=version)


def shown_agent(conversation: Conversation) -> dict[str, Any]:
    """What the conversation page shows of its agent: the version it started from, whether its
    settings changed since, and the version's tools (for the empty state). Reads no row when
    the caller selected `agent_version__agent`."""
    version = conversation.agent_version
    tools = () if version is None else tool_names(version.agent_parameters().enabled_tools)
    return {
        "agent_version": version,
        "changed_from": conversation.changed_from(),
        "agent_tools": tools,
    }


def _choice(offer: Offer, published: dict[Any, AgentVersion], chosen: Any) -> Choice:
    if not isinstance(offer, Agent):
        return Choice(offer.name, offer.description, tool_names(offer.tools), "", chosen is None)
    version = published[offer.published_id]
    tools = version.agent_parameters().enabled_tools
    is_default = chosen is not None and chosen.pk == offer.pk
    return Choice(
        offer.name, offer.description, tool_names(tools), f"v{version.number}", is_default
    )


def tool_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """Display names; a whole MCP server (`docs__*`) reads as "Every tool of docs"."""
    return tuple(
        f"Every tool of {name[:-3]}" if name.endswith("__*") else humanize(name) for name in names
    )


@login_required
@require_GET
def conversation_changes(request: HttpRequest, pk: int) -> HttpResponse:
    """What a conversation's settings are now, against the agent version it started from."""
    conversation = access.conversation(
        request.user, Action.READ, pk, Conversation.objects.select_related("agent_version__agent")
    )
    version = conversation.agent_version
    if version is None:
        raise Http404("This conversation started from the built-in Default.")
    try:
        changes = difference(version, Configuration.of(conversation))
    except ValueError:
        raise Http404("This conversation's settings are invalid.") from None
    context = {"conversation": conversation, "version": version, "changes": changes}
    return render(request, "chat/agents/changes.html", context)
