"""Pages of agents: the choice of agent for a new conversation, each user's default, what the
conversation page shows of the agent it started from, and its changes since, kept as a new
version or a new agent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async as sync_to_async
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Max
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from chat import access
from chat.access import Action, AgentAction
from chat.agent.tools import choice_label
from chat.models import Agent, AgentVersion, Configuration, Conversation
from chat.models.agents import comparable

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
from .forms import NewAgentForm, NewVersionForm
from .suites import Publishing, publish_or_plan, start_publication
from .versions import create_agent, find_version, new_version, start_conversation


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
        "changed_from_default": changed_from_default(conversation),
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
    return tuple(choice_label(name) for name in names)


@login_required
@require_GET
def conversation_changes(request: HttpRequest, pk: int) -> HttpResponse:
    """What a conversation's settings are now, against the agent version it started from (or
    the built-in Default's, once they differ), and the forms that keep them."""
    return _changes_page(request, _changed(request.user, pk))


@login_required
@require_POST
async def save_version(request: HttpRequest, pk: int) -> HttpResponse:
    """The conversation's settings as the next version of the agent it started from; with
    "Publish it now", published as the agent page's Publish does: through the agent's suite
    when it has one (its evaluation's page then shows what became of the version)."""
    user = await request.auser()
    saved = await sync_to_async(_save_version)(request, user, pk)
    if isinstance(saved, HttpResponse):
        return saved
    start_publication(saved, user=user)
    return redirect("chat:evals:run", saved.candidate.eval_run.pk)


def _save_version(request: HttpRequest, user: Any, pk: int) -> HttpResponse | Publishing:
    conversation = _changed(user, pk)
    started_from = conversation.agent_version
    if started_from is None:
        raise Http404("The built-in Default has no versions: save these settings as an agent.")
    form = NewVersionForm(request.POST)
    if not form.is_valid():
        return _refused(request, conversation, form.error_line(), version_form=form)
    try:
        made = new_version(
            agent=started_from.agent,
            conversation=conversation,
            user=user,
            note=form.cleaned_data["note"],
        )
    except AgentRefused as exc:
        return _refused(request, conversation, str(exc), version_form=form)
    line = f"Saved as {made}."
    if form.cleaned_data["publish"]:
        try:
            publishing = publish_or_plan(made, user=user)
        except AgentRefused as exc:
            messages.warning(request, f"{line} It is a draft: {exc}")
            return redirect("chat:conversation_detail", conversation.pk)
        if publishing is not None:
            messages.info(
                request,
                f"{line} It is evaluated on {made.agent.name}'s suite before it is published.",
            )
            return publishing
        line += f" New conversations with {made.agent.name} start from it."
    messages.success(request, line + _kept(conversation, made))
    return redirect("chat:conversation_detail", conversation.pk)


@login_required
@require_POST
def save_agent(request: HttpRequest, pk: int) -> HttpResponse:
    """The conversation's settings as version 1 of a new agent of the user's (a reader of a
    team-shared conversation too: the conversation itself stays as it is)."""
    conversation = _changed(request.user, pk)
    form = NewAgentForm(request.POST)
    if not form.is_valid():
        return _refused(request, conversation, form.error_line(), agent_form=form)
    try:
        made = create_agent(
            name=form.cleaned_data["name"],
            conversation=conversation,
            user=request.user,
            description=form.cleaned_data["description"],
            visibility=form.cleaned_data["visibility"],
        )
    except AgentRefused as exc:
        return _refused(request, conversation, str(exc), agent_form=form)
    kept = _kept(conversation, made.published)
    messages.success(request, f"Saved as a new agent, {made.name}.{kept}")
    return redirect("chat:conversation_detail", conversation.pk)


def changed_from_default(conversation: Conversation) -> bool:
    """Whether a conversation started from the built-in Default has settings of its own now
    (an endpoint, or parameters other than the server's); invalid settings say nothing."""
    if conversation.agent_version_id is not None:
        return False
    if conversation.profile_id is not None:
        return True
    try:
        parameters = conversation.agent_parameters()
    except ValueError:
        return False
    return comparable(parameters) != comparable(DEFAULT.configuration().parameters)


def _changed(user: Any, pk: int) -> Conversation:
    """The conversation `user` may read, if it started from an agent version or its settings
    differ from Default's; else 404 (there is nothing to compare, nor to save)."""
    conversation = access.conversation(
        user, Action.READ, pk, Conversation.objects.select_related("owner", "agent_version__agent")
    )
    if conversation.agent_version is None and not changed_from_default(conversation):
        raise Http404("This conversation has the built-in Default's settings.")
    return conversation


def _changes_page(
    request: HttpRequest,
    conversation: Conversation,
    *,
    version_form: NewVersionForm | None = None,
    agent_form: NewAgentForm | None = None,
    status: int = 200,
) -> HttpResponse:
    version = conversation.agent_version
    try:
        now = Configuration.of(conversation)
    except ValueError:
        raise Http404("This conversation's settings are invalid.") from None
    changes = difference(DEFAULT.configuration() if version is None else version, now)
    agent = None if version is None else version.agent
    refused = "" if agent is None else access.agent_denied(request.user, AgentAction.CHANGE, agent)
    newest = 0
    if agent is not None and not refused:
        newest = agent.versions.aggregate(newest=Max("number"))["newest"] or 0
    context = {
        "conversation": conversation,
        "version": version,
        "started_from": DEFAULT.name if version is None else str(version),
        "changes": changes,
        "change_refused": refused,
        "next_version": f"{agent.name} v{newest + 1}" if agent is not None else "",
        "version_form": version_form or NewVersionForm(),
        "agent_form": agent_form or NewAgentForm(),
    }
    return render(request, "chat/agents/changes.html", context, status=status)


def _refused(
    request: HttpRequest, conversation: Conversation, line: str, **forms: Any
) -> HttpResponse:
    """The changes page again, with the refusal in one line and what was typed kept."""
    messages.error(request, line)
    return _changes_page(request, conversation, status=422, **forms)


def _kept(conversation: Conversation, made: AgentVersion | None) -> str:
    """What a reader of someone else's conversation is told: it still names its own version."""
    if made is not None and conversation.agent_version_id == made.pk:
        return ""
    if access.is_replay(conversation):
        why = "an evaluation's replay stays as it was recorded"
    else:
        why = f"it is {conversation.owner.get_username()}'s"
    return f" This conversation still names what it started from: {why}."
