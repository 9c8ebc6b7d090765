"""The built-in Default agent, and each user's default: the agent their new conversations start
from.

Default is the server's own settings (the environment's endpoint, `runs.default_parameters()`),
a value in code, never a row: a team that makes no agent starts every conversation as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models.functions import Lower

from chat import access
from chat.access import AgentAction
from chat.models import Agent, AgentChoice, AgentVersion, Configuration
from chat.models.agents import BUILT_IN_NAME
from chat.runs import default_parameters

from .exceptions import AgentRefused


@dataclass(frozen=True)
class BuiltInAgent:
    """The server's own settings as an agent: what a conversation started without one gets."""

    name: str = BUILT_IN_NAME
    description: str = (
        "The server's own settings: the endpoint and model it is configured with, and every "
        "built-in tool."
    )

    def configuration(self) -> Configuration:
        return Configuration(profile=None, parameters=default_parameters())

    @property
    def tools(self) -> tuple[str, ...]:
        return self.configuration().parameters.enabled_tools


DEFAULT = BuiltInAgent()

Offer = Agent | BuiltInAgent
"""One choice of "New conversation": a stored agent, or the built-in Default."""


def default_agent(user: Any) -> Agent | None:
    """The agent `user` chose as their default, while they may still use it; None: the
    built-in Default (nothing chosen, or an agent made private since)."""
    if not getattr(user, "is_authenticated", False):
        return None
    choice = AgentChoice.objects.filter(user_id=user.pk).select_related("agent").first()
    chosen = None if choice is None else choice.agent
    if chosen is None or not access.may_agent(user, AgentAction.USE, chosen):
        return None
    return chosen


def choose_default(*, user: Any, agent: Agent | None) -> None:
    """`agent` (None: the built-in Default) becomes the one `user`'s new conversations start
    from. Refused for an agent they may not use."""
    if not getattr(user, "is_authenticated", False):
        raise AgentRefused(access.LOG_IN)
    if agent is not None and (refused := access.agent_denied(user, AgentAction.USE, agent)):
        raise AgentRefused(refused)
    AgentChoice.objects.update_or_create(user=user, defaults={"agent": agent})


def default_version(user: Any) -> AgentVersion | None:
    """The version `user`'s new conversations start from: their default agent's published one;
    None: the built-in Default."""
    agent = default_agent(user)
    if agent is None or agent.published_id is None:
        return None
    return AgentVersion.objects.select_related("agent").get(pk=agent.published_id)


def offered_to(user: Any) -> list[Offer]:
    """What "New conversation" offers `user`: their default first, then the built-in Default,
    then every other agent they may use that has a published version, by name."""
    usable = access.agents(user, AgentAction.USE).exclude(published=None)
    agents = list(usable.select_related("owner").order_by(Lower("name"), "pk"))
    chosen = default_agent(user)
    first: Offer = DEFAULT
    if chosen is not None and chosen.published_id is not None:
        first = next((agent for agent in agents if agent.pk == chosen.pk), DEFAULT)
    everything: list[Offer] = [DEFAULT, *agents]
    return [first, *(offer for offer in everything if offer is not first)]
