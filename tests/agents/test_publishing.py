"""Publishing (chat/agents/publishing.py): one version published per agent, under any number of
publishes at once, each recorded with who published it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from chat import agents
from chat.agents.publishing import mark_published
from chat.models import Agent, AgentVersion, Publication
from chat.testing import factories as make

from .test_versions import at_once, chosen


def with_drafts(owner: User, count: int) -> tuple[Agent, list[AgentVersion]]:
    """Support, version 1 published, and `count` drafts after it."""
    agent = agents.create_agent(name="Support", conversation=chosen(owner), user=owner)
    drafts = [
        agents.new_version(
            agent=agent, conversation=chosen(owner, max_tokens=100 + n), user=owner, note=f"{n}"
        )
        for n in range(count)
    ]
    return agent, drafts


@pytest.mark.django_db
def test_publishing_a_draft_records_who_and_publishing_it_again_changes_nothing() -> None:
    ada = make.user("ada")
    agent, (draft,) = with_drafts(ada, 1)

    published = agents.publish(version=draft, user=ada)

    assert published.published == draft
    agent.refresh_from_db()
    assert agent.published == draft
    latest = Publication.objects.first()
    assert latest is not None and (latest.version, latest.published_by) == (draft, ada)
    agents.publish(version=draft, user=ada)
    assert Publication.objects.count() == 2  # version 1, then the draft; not again


@pytest.mark.django_db
def test_a_version_of_another_agent_is_not_published() -> None:
    ada = make.user("ada")
    agent, _ = with_drafts(ada, 0)
    other = agents.create_agent(name="Billing", conversation=chosen(ada), user=ada)
    locked = Agent.objects.get(pk=agent.pk)
    with pytest.raises(agents.AgentRefused, match=r"Billing v1 is not a version of Support\."):
        mark_published(locked, other.published, ada)
    agent.refresh_from_db()
    assert agent.published.number == 1


@pytest.mark.django_db(transaction=True)
def test_publishes_at_once_leave_one_published_and_the_record_agrees() -> None:
    ada = make.user("ada")
    agent, drafts = with_drafts(ada, 4)

    results = at_once(
        [lambda draft=draft: agents.publish(version=draft, user=ada) for draft in drafts]
    )

    assert all(isinstance(result, Agent) for result in results), results
    agent.refresh_from_db()
    assert agent.published in drafts
    # Serialized by the agent's row lock: the last publication recorded is the published one.
    assert Publication.objects.filter(agent=agent).first().version == agent.published
    assert Publication.objects.filter(agent=agent).count() == 5


@pytest.mark.django_db
def test_an_agent_deleted_meanwhile_is_refused_in_one_line() -> None:
    ada = make.user("ada")
    agent, (draft,) = with_drafts(ada, 1)
    Agent.objects.filter(pk=agent.pk).delete()

    with pytest.raises(agents.AgentRefused, match=r"^This agent was deleted\.$"):
        agents.publish(version=draft, user=ada)
    with pytest.raises(agents.AgentRefused, match=r"^This agent was deleted\.$"):
        agents.new_version(agent=agent, conversation=chosen(ada, top_p=0.3), user=ada)
    assert not AgentVersion.objects.exists() and not Publication.objects.exists()
