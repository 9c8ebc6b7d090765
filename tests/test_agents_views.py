"""Chatting with an agent in the browser: "New conversation" starts from the chosen agent's
published version, or from the user's default (chat/views.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from chat import agents
from chat.models import Agent, Conversation, Visibility
from chat.runs import default_parameters
from chat.testing import factories as make

pytestmark = pytest.mark.django_db

SUPPORT_PROMPT = "You answer support questions."


def support_of(owner: Any, name: str = "Support", visibility: str = Visibility.TEAM) -> Agent:
    """An agent whose version 1 holds one system prompt and the clock tool alone."""
    settings = make.conversation(
        owner, system_prompts=[SUPPORT_PROMPT], enabled_tools=["get_current_time"]
    )
    return agents.create_agent(name=name, conversation=settings, user=owner, visibility=visibility)


def started(client: Client, **form: str) -> Conversation:
    before = set(Conversation.objects.values_list("pk", flat=True))
    response = client.post(reverse("chat:conversation_create"), form)
    assert response.status_code == 302, response.content.decode()
    made = Conversation.objects.exclude(pk__in=before).get()
    assert response["Location"] == reverse("chat:conversation_detail", args=[made.pk])
    return made


def test_without_an_agent_a_conversation_starts_from_default(client_in: Client, user: Any) -> None:
    made = started(client_in)
    assert made.agent_version is None
    assert made.agent_parameters() == default_parameters()


def test_starting_from_an_agent_records_its_version_and_its_settings(
    client_in: Client, user: Any
) -> None:
    support = support_of(make.user("bob"))
    made = started(client_in, agent="Support")
    assert made.agent_version == support.published
    assert made.owner == user
    assert made.agent_parameters().system_prompts == (SUPPORT_PROMPT,)
    assert made.agent_parameters().enabled_tools == ("get_current_time",)


def test_the_users_default_agent_is_used_when_none_is_named(client_in: Client, user: Any) -> None:
    support = support_of(make.user("bob"))
    agents.choose_default(user=user, agent=support)
    assert started(client_in).agent_version == support.published
    assert started(client_in, agent="Default").agent_version is None


def test_a_private_agent_of_someone_else_is_refused_and_nothing_stored(
    client_in: Client, user: Any
) -> None:
    support_of(make.user("bob"), name="Secret", visibility=Visibility.PRIVATE)
    before = Conversation.objects.count()
    response = client_in.post(reverse("chat:conversation_create"), {"agent": "Secret"})
    assert response.status_code == 422
    assert "No agent named &#x27;Secret&#x27; that you may use." in response.content.decode()
    assert Conversation.objects.count() == before
