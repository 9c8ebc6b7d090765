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


def offered_names(client: Client) -> list[str]:
    response = client.get(reverse("chat:agent_choices"))
    assert response.status_code == 200
    return [choice.name for choice in response.context["choices"]]


def test_the_choices_are_default_and_the_agents_the_user_may_use(
    client_in: Client, user: Any
) -> None:
    bob = make.user("bob")
    support_of(bob)
    support_of(bob, name="Bob's own", visibility=Visibility.PRIVATE)
    support_of(user, name="Mine", visibility=Visibility.PRIVATE)
    assert offered_names(client_in) == ["Default", "Mine", "Support"]
    page = client_in.get(reverse("chat:agent_choices")).content.decode()
    assert "Bob&#x27;s own" not in page
    assert "Get current time" in page and "v1" in page
    assert 'aria-label="Make my default: Support"' in page


def test_choosing_a_default_puts_it_first_and_new_conversations_start_from_it(
    client_in: Client, user: Any
) -> None:
    support = support_of(make.user("bob"))
    response = client_in.post(reverse("chat:agent_default"), {"agent": "Support"})
    assert response["Location"] == reverse("chat:agent_choices")
    assert offered_names(client_in) == ["Support", "Default"]
    assert started(client_in).agent_version == support.published

    client_in.post(reverse("chat:agent_default"), {"agent": "Default"})
    assert offered_names(client_in) == ["Default", "Support"]


def test_a_default_the_user_may_not_use_is_refused_in_one_line(
    client_in: Client, user: Any
) -> None:
    support_of(make.user("bob"), name="Secret", visibility=Visibility.PRIVATE)
    response = client_in.post(reverse("chat:agent_default"), {"agent": "Secret"}, follow=True)
    assert "No agent named &#x27;Secret&#x27; that you may use." in response.content.decode()
    assert agents.default_agent(user) is None


def test_the_header_names_the_version_and_the_empty_state_what_it_can_do(
    client_in: Client, user: Any
) -> None:
    support = support_of(make.user("bob"))
    Agent.objects.filter(pk=support.pk).update(description="Answers billing questions.")
    made = started(client_in, agent="Support")
    page = client_in.get(reverse("chat:conversation_detail", args=[made.pk])).content.decode()
    label = f'id="agent-label" href="/agents/{support.slug}/versions/">'
    assert f"{label}Support v1</a>" in page
    assert "<strong>Support</strong>: Answers billing questions." in page
    assert "Get current time" in page

    parameters = made.agent_parameters().model_copy(update={"temperature": 0.1})
    made.set_agent_parameters(parameters)
    made.save()
    page = client_in.get(reverse("chat:conversation_detail", args=[made.pk])).content.decode()
    assert ">changed from Support v1</a>" in page


def test_a_conversation_from_default_shows_no_agent_label(client_in: Client, user: Any) -> None:
    made = started(client_in)
    page = client_in.get(reverse("chat:conversation_detail", args=[made.pk])).content.decode()
    assert "agent-label" not in page and "Ask anything." in page


def test_the_agent_page_lists_versions_newest_first_with_what_changed(
    client_in: Client, user: Any
) -> None:
    support = support_of(user)
    changed = make.conversation(
        user,
        system_prompts=["You answer support questions.\nBe brief."],
        enabled_tools=["get_current_time", "search_cards"],
        temperature=0.2,
    )
    agents.new_version(agent=support, conversation=changed, user=user, note="Shorter answers.")
    response = client_in.get(reverse("chat:agent_detail", args=[support.slug]))
    assert [row.version.number for row in response.context["rows"]] == [2, 1]
    page = response.content.decode()
    assert page.index("Support v2") < page.index("Support v1")
    assert "Shorter answers." in page and "The first version." in page
    assert '<strong>Tools added:</strong> <ins title="search_cards">Search cards</ins>' in page
    assert "<del>provider default</del> → <ins>0.2</ins>" in page
    assert "<caption>System prompt 1: changed</caption>" in page
    assert "<td></td><td>Be brief.</td>" in page


def test_a_private_agent_of_someone_else_has_no_page(client_in: Client, user: Any) -> None:
    secret = support_of(make.user("bob"), name="Secret", visibility=Visibility.PRIVATE)
    response = client_in.get(reverse("chat:agent_detail", args=[secret.slug]))
    assert response.status_code == 404


def test_changed_from_links_to_what_differs_from_the_version(client_in: Client, user: Any) -> None:
    support_of(make.user("bob"))
    made = started(client_in, agent="Support")
    made.set_agent_parameters(made.agent_parameters().model_copy(update={"temperature": 0.1}))
    made.save()
    changes = reverse("chat:conversation_changes", args=[made.pk])
    page = client_in.get(reverse("chat:conversation_detail", args=[made.pk])).content.decode()
    assert f'id="agent-label" href="{changes}">changed from Support v1</a>' in page
    page = client_in.get(changes).content.decode()
    assert "<h1>Changed from Support v1</h1>" in page
    assert "<strong>Temperature:</strong> <del>provider default</del> → <ins>0.1</ins>" in page


def test_a_conversation_from_default_or_of_someone_else_has_no_changes_page(
    client_in: Client, user: Any
) -> None:
    made = started(client_in)
    assert client_in.get(reverse("chat:conversation_changes", args=[made.pk])).status_code == 404
    theirs = make.new_conversation(make.user("bob"))
    response = client_in.get(reverse("chat:conversation_changes", args=[theirs.pk]))
    assert response.status_code == 404
