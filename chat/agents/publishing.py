"""Publishing: which version of an agent new conversations use, and who chose it, when."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from chat import access
from chat.access import AgentAction
from chat.models import Agent, AgentVersion, Publication

from .exceptions import AgentRefused

GONE = "This agent was deleted."


def publish(*, version: AgentVersion, user: Any) -> Agent:
    """Make `version` the one its agent's new conversations use, and record who did; the
    agent, as it now is. Publishing the published version changes and records nothing.

    Raises AgentRefused when `user` may not change the agent. One version is published per
    agent however many publish at once: `Agent.published` is one column, set under the agent's
    row lock, so the last publication recorded is always the published one.
    """
    with transaction.atomic():
        # The rule is asked of the agent as it is now, not as the caller last read it.
        agent = lock(version.agent_id)
        if refused := access.agent_denied(user, AgentAction.CHANGE, agent):
            raise AgentRefused(refused)
        mark_published(agent, version, user)
    return agent


def lock(pk: int) -> Agent:
    """The agent as it is now, its row locked until the transaction ends; AgentRefused when it
    was deleted meanwhile."""
    found = Agent.objects.select_for_update().filter(pk=pk).first()
    if found is None:
        raise AgentRefused(GONE)
    return found


def mark_published(agent: Agent, version: AgentVersion, user: Any) -> None:
    """`version` published, and the record of it; the caller holds `agent`'s row lock (in a
    transaction) and has asked the rule."""
    if version.agent_id != agent.pk:
        raise AgentRefused(f"{version} is not a version of {agent.name}.")
    if agent.published_id == version.pk:
        return
    agent.published = version
    agent.save(update_fields=["published", "updated_at"])
    by = user if getattr(user, "is_authenticated", False) else None
    Publication.objects.create(agent=agent, version=version, published_by=by)
