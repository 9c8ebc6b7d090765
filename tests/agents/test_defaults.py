"""The built-in Default and each user's default agent (chat/agents/defaults.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser

from chat import agents
from chat.models import Agent, Visibility
from chat.runs import default_parameters
from chat.testing import factories as make

from .test_versions import chosen

pytestmark = pytest.mark.django_db


def test_default_is_the_servers_own_settings_and_no_row() -> None:
    built_in = agents.DEFAULT.configuration()
    assert (built_in.profile, built_in.parameters) == (None, default_parameters())
    assert agents.DEFAULT.tools == default_parameters().enabled_tools
    assert agents.configuration(None) == built_in
    assert not Agent.objects.exists()


def test_a_team_that_makes_no_agent_is_offered_default_alone() -> None:
    ada = make.user("ada")
    assert agents.offered_to(ada) == [agents.DEFAULT]
    assert agents.default_agent(ada) is None and agents.default_version(ada) is None


def test_the_users_default_comes_first_then_default_then_the_rest_by_name() -> None:
    ada, bob = make.user("ada"), make.user("bob")
    team = Visibility.TEAM
    zed = agents.create_agent(name="zed", conversation=chosen(ada), user=ada, visibility=team)
    billing = agents.create_agent(name="Billing", conversation=chosen(bob), user=bob)
    support = agents.create_agent(
        name="Support", conversation=chosen(bob), user=bob, visibility=team
    )
    agents.create_agent(name="Ada's own", conversation=chosen(ada), user=ada)  # private

    assert [offer.name for offer in agents.offered_to(bob)] == [
        "Default",
        "Billing",
        "Support",
        "zed",
    ]

    agents.choose_default(user=bob, agent=support)
    assert agents.offered_to(bob) == [support, agents.DEFAULT, billing, zed]
    assert agents.default_version(bob) == support.published

    agents.choose_default(user=bob, agent=None)
    assert agents.offered_to(bob)[0] == agents.DEFAULT
    assert agents.default_version(bob) is None


def test_a_default_made_private_since_falls_back_to_default() -> None:
    ada, bob = make.user("ada"), make.user("bob")
    support = agents.create_agent(
        name="Support", conversation=chosen(ada), user=ada, visibility=Visibility.TEAM
    )
    agents.choose_default(user=bob, agent=support)
    Agent.objects.filter(pk=support.pk).update(visibility=Visibility.PRIVATE)

    assert agents.default_agent(bob) is None
    assert agents.default_version(bob) is None
    assert agents.offered_to(bob) == [agents.DEFAULT]


def test_only_an_agent_the_user_may_use_is_chosen() -> None:
    ada, bob = make.user("ada"), make.user("bob")
    private = agents.create_agent(name="Support", conversation=chosen(ada), user=ada)
    with pytest.raises(agents.AgentRefused, match="This agent is private"):
        agents.choose_default(user=bob, agent=private)
    with pytest.raises(agents.AgentRefused, match="Log in"):
        agents.choose_default(user=AnonymousUser(), agent=None)
    assert agents.default_agent(bob) is None
    assert agents.offered_to(AnonymousUser()) == [agents.DEFAULT]
