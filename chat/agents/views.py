"""Pages of agents: the choice of agent for a new conversation, and each user's default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from chat.agent import humanize
from chat.models import Agent, AgentVersion

from .defaults import DEFAULT, Offer, choose_default, default_agent, offered_to
from .exceptions import AgentRefused
from .versions import find_version


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


def _choice(offer: Offer, published: dict[Any, AgentVersion], chosen: Any) -> Choice:
    if not isinstance(offer, Agent):
        return Choice(offer.name, offer.description, _tools(offer.tools), "", chosen is None)
    version = published[offer.published_id]
    tools = version.agent_parameters().enabled_tools
    is_default = chosen is not None and chosen.pk == offer.pk
    return Choice(offer.name, offer.description, _tools(tools), f"v{version.number}", is_default)


def _tools(names: tuple[str, ...]) -> tuple[str, ...]:
    """Display names; a whole MCP server (`docs__*`) reads as "Every tool of docs"."""
    return tuple(
        f"Every tool of {name[:-3]}" if name.endswith("__*") else humanize(name) for name in names
    )
