"""Versions: an agent made from a conversation's settings, a new version of one, what a version
holds, and a new conversation that starts from it.

Every function asks `chat.access` first and stores nothing when it refuses (AgentRefused, one
line for the user).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils.text import slugify

from chat import access
from chat.access import Action, AgentAction
from chat.agent.contracts import validation_text
from chat.models import (
    Agent,
    AgentVersion,
    Configuration,
    Conversation,
    ProviderProfile,
    Visibility,
)
from chat.models.agents import BUILT_IN_NAME, NAME_CHARS

from . import defaults
from .exceptions import AgentRefused
from .publishing import GONE, lock, mark_published

FIRST_NOTE = "First version."
SLUG_SUFFIX_ROOM = 8
"""Characters kept free at the end of a slug for "-2", "-3", …"""


def create_agent(
    *,
    name: str,
    conversation: Conversation,
    user: Any,
    description: str = "",
    visibility: str = Visibility.PRIVATE,
    note: str = FIRST_NOTE,
) -> Agent:
    """A new agent of `user`'s whose version 1, published, holds the conversation's settings
    (its endpoint and parameters, MCP tools and whole servers as chosen); the conversation,
    when it is `user`'s own, now records that version.

    Refused: a conversation `user` may not read, a name that is taken or not allowed, settings
    or text the bounded gate keeps out.
    """
    if refused := access.denied(user, Action.READ, conversation):
        raise AgentRefused(refused)
    configuration = _settings_of(conversation)
    name = name.strip()
    if not name:
        raise AgentRefused("An agent needs a name.")
    agent = Agent(
        name=name,
        slug=free_slug(name),
        description=description.strip(),
        owner=user,
        visibility=visibility,
    )
    check(agent, exclude=["published", "suite"])
    try:
        with transaction.atomic():
            agent.save()
            version = _add_version(agent, configuration, user, note)
            mark_published(agent, version, user)
            _record_in(conversation, version, user)
    except IntegrityError:
        # Another agent took the name or the slug between the check and the save.
        raise AgentRefused(
            f"Another agent was made with the name {name!r}, or the same address, at the same "
            "moment: try again, or choose another name."
        ) from None
    return agent


def new_version(
    *, agent: Agent, conversation: Conversation, user: Any, note: str = ""
) -> AgentVersion:
    """The agent's next version, a draft, holding the conversation's settings, with a note
    saying what changed (`suites.publish_or_plan` publishes it, through the agent's suite).
    The conversation, when it is `user`'s own, now records the new version.

    Refused: `user` may not change the agent or read the conversation; the settings are the
    agent's latest version's (nothing changed); the settings or the note do not pass the gate.
    """
    with transaction.atomic():
        # The rule is asked of the agent as it is now, not as the caller last read it.
        locked = lock(agent.pk)
        if refused := access.agent_denied(user, AgentAction.CHANGE, locked):
            raise AgentRefused(refused)
        if refused := access.denied(user, Action.READ, conversation):
            raise AgentRefused(refused)
        configuration = _settings_of(conversation)
        latest = locked.versions.order_by("-number").select_related("agent").first()
        if latest is not None and latest.matches(conversation):
            raise AgentRefused(
                f"These settings are {latest}'s: nothing changed, so no version was made."
            )
        version = _add_version(locked, configuration, user, note)
        _record_in(conversation, version, user)
    return version


def configuration(version: AgentVersion | None) -> Configuration:
    """What a version holds: its endpoint (a profile, or None for the server's own) and its
    parameters; None is the built-in Default (the server's own settings).

    Raises AgentRefused when a version's stored parameters no longer validate.
    """
    if version is None:
        return defaults.DEFAULT.configuration()
    try:
        return version.configuration()
    except ValueError as exc:
        raise AgentRefused(
            f"The settings of {version} are invalid: {validation_text(exc)}"
        ) from None


def start_conversation(*, user: Any, version: AgentVersion | None) -> Conversation:
    """A new conversation of `user`'s with the version's endpoint and parameters, recording the
    version it started from; None starts from the built-in Default.

    Any version of an agent `user` may use can be started (a draft too, to try it). Refused:
    a private agent of someone else's, or an endpoint (provider profile) `user` may not use.
    """
    if not getattr(user, "is_authenticated", False):
        raise AgentRefused(access.LOG_IN)
    if version is not None:
        # Read again: the rule is asked of the agent as it is now, and the version still exists.
        found = AgentVersion.objects.select_related("agent", "profile").filter(pk=version.pk)
        version = found.first()
        if version is None:
            raise AgentRefused(GONE)
        if refused := access.agent_denied(user, AgentAction.USE, version.agent):
            raise AgentRefused(refused)
    chosen = configuration(version)
    if version is not None:
        check_endpoint(user, version)
    profile = chosen.profile
    conversation = Conversation(owner=user, profile=profile, agent_version=version)
    conversation.set_agent_parameters(chosen.parameters)
    conversation.save()
    return conversation


def check_endpoint(user: Any, version: AgentVersion) -> None:
    """AgentRefused when the version talks to a provider profile `user` may not use."""
    profile = version.profile
    usable = ProviderProfile.objects.usable_by(user)
    if profile is not None and not usable.filter(pk=profile.pk).exists():
        raise AgentRefused(
            f"{version} talks to the provider {profile.name!r}, which you may not use: choose "
            "another agent, or ask an administrator."
        )


def find_version(user: Any, reference: str) -> AgentVersion | None:
    """The version `reference` names among the agents `user` may use: NAME (or its slug) for
    the published version, NAME@N for version N; "Default" (None) is the built-in agent."""
    name, at, number = reference.strip().rpartition("@")
    if not at:
        name, number = number, ""
    if name.casefold() == BUILT_IN_NAME.casefold():
        if at:
            raise AgentRefused(f"The built-in {BUILT_IN_NAME} agent has no numbered versions.")
        return None
    if at and not number.isdigit():
        raise AgentRefused(f"{reference!r}: write NAME, or NAME@N for its version N.")
    usable = access.agents(user, AgentAction.USE).select_related("published__agent")
    # The name first: another agent's slug may be spelled like it.
    agent = usable.filter(name=name).first() or usable.filter(slug=name).first()
    if agent is None:
        raise AgentRefused(f"No agent named {name!r} that you may use.")
    if not at:
        if agent.published is None:
            raise AgentRefused(f"{agent.name} has no published version.")
        return agent.published
    found = agent.versions.select_related("agent").filter(number=int(number)).first()
    if found is None:
        newest = agent.versions.aggregate(newest=Max("number"))["newest"] or 0
        raise AgentRefused(f"{agent.name} has no version {number} (it has 1 to {newest}).")
    return found


def _settings_of(conversation: Conversation) -> Configuration:
    try:
        return Configuration.of(conversation)
    except ValueError as exc:
        raise AgentRefused(
            f"The settings of this conversation are invalid: {validation_text(exc)}"
        ) from None


def _add_version(agent: Agent, configuration: Configuration, user: Any, note: str) -> AgentVersion:
    """The agent's next version; the caller holds the agent's row lock (or just made it)."""
    newest = agent.versions.aggregate(newest=Max("number"))["newest"] or 0
    version = AgentVersion(
        agent=agent,
        number=newest + 1,
        profile=configuration.profile,
        parameters=configuration.parameters.to_json(),
        note=note.strip(),
        author=user,
    )
    check(version, exclude=["agent", "profile", "author"])
    version.save()
    return version


def check(row: Agent | AgentVersion, *, exclude: list[str]) -> None:
    """The model's own validators (the bounded gate on text and parameters, the name rule,
    uniqueness), as one line."""
    try:
        row.full_clean(exclude=exclude, validate_constraints=False)
    except ValidationError as exc:
        raise AgentRefused(" ".join(exc.messages)) from None


def free_slug(name: str) -> str:
    """A slug from the name that no agent (nor the built-in one) has: `support`, `support-2`…"""
    base = slugify(name, allow_unicode=True)[: NAME_CHARS - SLUG_SUFFIX_ROOM].strip("-") or "agent"
    taken = set(Agent.objects.filter(slug__startswith=base).values_list("slug", flat=True))
    taken.add(slugify(BUILT_IN_NAME))
    slug, number = base, 1
    while slug in taken:
        number += 1
        slug = f"{base}-{number}"
    return slug


def _record_in(conversation: Conversation, version: AgentVersion, user: Any) -> None:
    """The conversation whose settings a version holds now records it, when `user` configures
    it (their own conversation): it is that version's, not changed from an older one."""
    if access.may(user, Action.CONFIGURE, conversation):
        Conversation.objects.filter(pk=conversation.pk).update(agent_version=version)
        conversation.agent_version = version
