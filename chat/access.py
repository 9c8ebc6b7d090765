"""Who may do what in a conversation: the one rule that every entry point asks (pages, socket
frames, the admin, commands, the start of a run).

A conversation's owner may do everything. Shared with the team, it may be read, annotated and
copied (forked into a conversation of one's own) by every logged-in user; writing, deciding a
tool call and configuring stay its owner's.
An evaluation's replay is its record of an attempt: read and annotated as any shared
conversation, written in and configured by no one (the evaluation writes it without asking).
Staff and superusers have no more say in the chat than anyone: the admin, behind Django's own
permissions, is where staff read every conversation (and, with the delete permission, delete
one); it changes none. Beyond that, staff may only stop an evaluation someone else started.

Agents: every logged-in user may chat with the team's agents; a private agent is its owner's
alone. Its owner makes versions and publishes, and so, for the team's agents, does whoever
holds the permission to change agents.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from django.db.models import Q
from django.http import Http404

from chat.models import (
    Agent,
    AgentQuerySet,
    Conversation,
    ConversationQuerySet,
    Purpose,
    Visibility,
)


class Action(StrEnum):
    READ = "read"
    """Open the page, the inspector and the waterfall, a tool call, a message's text; compare
    its last turn."""
    ANNOTATE = "annotate"
    """Mark a reply or a tool call, save a moment as a case: rows of their own."""
    WRITE = "write"
    """Send, edit, regenerate, switch versions, stop; start a run."""
    DECIDE = "decide"
    """Approve or deny a tool call that waits for a person."""
    CONFIGURE = "configure"
    """Settings, model, title, sharing, deletion."""
    COPY = "copy"
    """Fork it into a conversation of one's own ("Continue in my own copy"): the copy belongs to
    whoever makes it, and this conversation is not changed."""


TEAM = frozenset({Action.READ, Action.ANNOTATE, Action.COPY})
"""What the team may do in a conversation shared with it; the rest is its owner's alone."""

RECORD = frozenset({Action.WRITE, Action.CONFIGURE, Action.COPY})
"""What no one may do in an evaluation's replay: it stays as the evaluation recorded it, and
is continued by no one (a case replays it instead)."""

READ_ONLY = "This conversation is shared with you to read: only its owner can write in it."
NOT_YOURS = "This conversation is not yours: only its owner can write in it."
NOT_SHARED = "This conversation is not yours, and not shared with the team."
REPLAY = "This is an evaluation's replay: it is read-only."


def _user_pk(user: Any) -> Any:
    """The user's id, or None for nobody (anonymous, or no user at all)."""
    return user.pk if getattr(user, "is_authenticated", False) else None


def condition(user: Any, action: Action) -> Q:
    """The rule as a filter on conversations (for lists and lookups)."""
    pk = _user_pk(user)
    if pk is None:
        return Q(pk__in=[])
    allowed = Q(owner_id=pk) | Q(shared=True) if action in TEAM else Q(owner_id=pk)
    return allowed & ~Q(purpose=Purpose.EVAL) if action in RECORD else allowed


def may(user: Any, action: Action, conversation: Conversation) -> bool:
    """The rule for one conversation already in hand (no query)."""
    pk = _user_pk(user)
    if pk is None:
        return False
    allowed = conversation.owner_id == pk or (action in TEAM and conversation.shared)
    return allowed and not (action in RECORD and is_replay(conversation))


def is_replay(conversation: Conversation) -> bool:
    return conversation.purpose == Purpose.EVAL


def denied(user: Any, action: Action, conversation: Conversation) -> str:
    """Why `user` may not do `action` here, in one line for them; "" when they may."""
    if may(user, action, conversation):
        return ""
    if not may(user, Action.READ, conversation):
        return NOT_SHARED if action in TEAM else NOT_YOURS
    return REPLAY if action in RECORD and is_replay(conversation) else READ_ONLY


def conversations(
    user: Any, action: Action, queryset: ConversationQuerySet | None = None
) -> ConversationQuerySet:
    """The conversations (of `queryset`) in which `user` may do `action`."""
    found = Conversation.objects.all() if queryset is None else queryset
    return found.filter(condition(user, action))


def shared_with(user: Any, queryset: ConversationQuerySet | None = None) -> ConversationQuerySet:
    """What the team shares with `user`: readable, not theirs."""
    return conversations(user, Action.READ, queryset).exclude(owner_id=_user_pk(user))


def conversation(
    user: Any, action: Action, pk: int, queryset: ConversationQuerySet | None = None
) -> Conversation:
    """The conversation `pk` if `user` may do `action` in it; else 404, whether it exists or
    not (a stranger learns nothing of another's conversations)."""
    found = conversations(user, action, queryset).filter(pk=pk).first()
    if found is None:
        raise Http404("No such conversation.")
    return found


def may_stop(user: Any, started_by_id: int | None) -> bool:
    """Stop belongs to whoever started an evaluation or a comparison, and to staff."""
    pk = _user_pk(user)
    if pk is None:
        return False
    return bool(user.is_staff) or (started_by_id is not None and started_by_id == pk)


# Agents. Everyone logged in may chat with the team's agents; a private agent is its owner's
# alone. Making versions and publishing: the owner, and for the team's agents whoever holds
# CHANGE_AGENT (superusers hold every permission; even they do not change a private agent).


class AgentAction(StrEnum):
    USE = "use"
    """See it listed; start a conversation from any of its versions (drafts too, to try them)."""
    CHANGE = "change"
    """Make a version, publish one; edit its name, description, visibility and suite."""


CHANGE_AGENT = "chat.change_agent"
"""Who holds it may change every team agent, as its owner does."""

LOG_IN = "Log in to use agents."
PRIVATE_AGENT = "This agent is private: only its owner can use it."
NOT_YOUR_AGENT = (
    "Only this agent's owner, and people allowed to change the team's agents, can make versions "
    "of it and publish one."
)


def agent_condition(user: Any, action: AgentAction) -> Q:
    """The agent rule as a filter (for lists and lookups)."""
    pk = _user_pk(user)
    if pk is None:
        return Q(pk__in=[])
    mine = Q(owner_id=pk)
    if action == AgentAction.USE or user.has_perm(CHANGE_AGENT):
        return mine | Q(visibility=Visibility.TEAM)
    return mine


def may_agent(user: Any, action: AgentAction, agent: Agent) -> bool:
    """The agent rule for one agent already in hand (no query but the user's permissions)."""
    pk = _user_pk(user)
    if pk is None:
        return False
    if agent.owner_id == pk:
        return True
    if agent.visibility != Visibility.TEAM:
        return False
    return action == AgentAction.USE or bool(user.has_perm(CHANGE_AGENT))


def agent_denied(user: Any, action: AgentAction, agent: Agent) -> str:
    """Why `user` may not do `action` with this agent, in one line for them; "" when they may."""
    if may_agent(user, action, agent):
        return ""
    if _user_pk(user) is None:
        return LOG_IN
    return NOT_YOUR_AGENT if may_agent(user, AgentAction.USE, agent) else PRIVATE_AGENT


def agents(user: Any, action: AgentAction, queryset: AgentQuerySet | None = None) -> AgentQuerySet:
    """The agents (of `queryset`) with which `user` may do `action`."""
    found = Agent.objects.all() if queryset is None else queryset
    return found.filter(agent_condition(user, action))


def agent(user: Any, action: AgentAction, pk: int, queryset: AgentQuerySet | None = None) -> Agent:
    """The agent `pk` if `user` may do `action` with it; else 404, whether it exists or not."""
    found = agents(user, action, queryset).filter(pk=pk).first()
    if found is None:
        raise Http404("No such agent.")
    return found
