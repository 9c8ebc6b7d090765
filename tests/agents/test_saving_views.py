"""A conversation's changed settings kept from its changes page: "Save as a new version" of the
agent it started from, "Save as a new agent" (chat/agents/views.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from chat import access, agents
from chat.models import Agent, AgentVersion, Conversation, Visibility
from chat.testing import factories as make
from chat.transcripts.limits import NOTE_CHARS

pytestmark = pytest.mark.django_db(transaction=True)  # save_version is async: another thread


def support_of(owner: Any, visibility: str = Visibility.TEAM) -> Agent:
    """Support v1: one system prompt and the clock."""
    settings = make.conversation(
        owner, system_prompts=["You answer support questions."], enabled_tools=["get_current_time"]
    )
    return agents.create_agent(
        name="Support", conversation=settings, user=owner, visibility=visibility
    )


def changed(owner: Any, support: Agent, *, shared: bool = False) -> Conversation:
    """A conversation of `owner`'s from Support's published version, its temperature changed."""
    made = agents.start_conversation(user=owner, version=support.published)
    made.set_agent_parameters(made.agent_parameters().changed(temperature=0.1))
    made.shared = shared
    made.save()
    assert made.changed_from() == support.published
    return made


def changes_url(made: Conversation) -> str:
    return reverse("chat:conversation_changes", args=[made.pk])


def version_url(made: Conversation) -> str:
    return reverse("chat:conversation_save_version", args=[made.pk])


def agent_url(made: Conversation) -> str:
    return reverse("chat:conversation_save_agent", args=[made.pk])


def detail_url(made: Conversation) -> str:
    return reverse("chat:conversation_detail", args=[made.pk])


def flashed(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def stored() -> tuple[int, int]:
    return Agent.objects.count(), AgentVersion.objects.count()


def test_the_changes_page_offers_both_actions(client_in: Client, user: Any) -> None:
    made = changed(user, support_of(user))
    page = client_in.get(changes_url(made)).content.decode()
    assert '<a href="#save-version">as a new version of Support</a>' in page
    assert '<a href="#save-agent">as a new agent</a>' in page
    assert f'action="{version_url(made)}"' in page and f'action="{agent_url(made)}"' in page
    assert '<button type="submit" class="primary">Save as Support v2</button>' in page
    assert "Publish it now" in page and "Who can chat with it" in page


def test_save_as_a_new_published_version(client_in: Client, user: Any) -> None:
    support = support_of(user)
    made = changed(user, support)
    response = client_in.post(
        version_url(made), {"version-note": "Cooler.", "version-publish": "on"}, follow=True
    )
    assert response.redirect_chain == [(detail_url(made), 302)]
    assert flashed(response) == [
        "Saved as Support v2. New conversations with Support start from it."
    ]
    made.refresh_from_db()
    support.refresh_from_db()
    assert made.agent_version == support.published
    assert (support.published.number, support.published.note) == (2, "Cooler.")
    page = response.content.decode()
    assert 'id="agent-label"' in page and ">Support v2</a>" in page
    assert "changed from" not in page


def test_save_as_a_draft_keeps_the_published_version(client_in: Client, user: Any) -> None:
    support = support_of(user)
    made = changed(user, support)
    response = client_in.post(version_url(made), {"version-note": ""}, follow=True)
    assert flashed(response) == ["Saved as Support v2."]
    made.refresh_from_db()
    support.refresh_from_db()
    assert made.agent_version is not None and made.agent_version.number == 2
    assert support.published is not None and support.published.number == 1


def test_without_the_change_permission_the_version_is_not_offered_nor_made(
    client_in: Client, user: Any
) -> None:
    made = changed(user, support_of(make.user("bob")))
    page = client_in.get(changes_url(made)).content.decode()
    assert escape(access.NOT_YOUR_AGENT) in page
    assert f'action="{version_url(made)}"' not in page
    assert 'href="#save-version"' not in page
    assert f'action="{agent_url(made)}"' in page
    before = stored()
    response = client_in.post(version_url(made), {"version-note": "Mine now."})
    assert response.status_code == 422
    assert flashed(response) == [access.NOT_YOUR_AGENT]
    assert stored() == before
    made.refresh_from_db()
    assert made.changed_from() is not None


def test_the_change_permission_lets_a_team_agent_be_versioned(client_in: Client, user: Any) -> None:
    support = support_of(make.user("bob"))
    user.user_permissions.add(Permission.objects.get(codename="change_agent"))
    made = changed(user, support)
    response = client_in.post(version_url(made), {"version-note": "Cooler."})
    assert response.status_code == 302
    made.refresh_from_db()
    assert str(made.agent_version) == "Support v2"
    assert made.agent_version is not None and made.agent_version.author == user


def test_nothing_changed_is_refused_in_one_line(client_in: Client, user: Any) -> None:
    support = support_of(user)
    made = agents.start_conversation(user=user, version=support.published)
    page = client_in.get(changes_url(made)).content.decode()
    assert "Nothing differs: the settings are Support v1's." in page
    assert f'action="{version_url(made)}"' not in page
    before = stored()
    response = client_in.post(version_url(made), {"version-note": "Same."})
    assert response.status_code == 422
    assert flashed(response) == [
        "These settings are Support v1's: nothing changed, so no version was made."
    ]
    assert stored() == before


def test_a_note_too_long_is_refused_by_the_gate_and_kept(client_in: Client, user: Any) -> None:
    made = changed(user, support_of(user))
    before = stored()
    note = "n" * (NOTE_CHARS + 1)
    response = client_in.post(version_url(made), {"version-note": note, "version-publish": "on"})
    assert response.status_code == 422
    assert flashed(response) == ["10,001 characters, more than the 10,000 allowed."]
    assert stored() == before
    page = response.content.decode()
    assert f">\n{note}</textarea>" in page
    assert re.search(r'<input type="checkbox" name="version-publish"[^>]* checked>', page)


def test_save_as_a_new_agent(client_in: Client, user: Any) -> None:
    support = support_of(make.user("bob"))
    made = changed(user, support)
    form = {
        "agent-name": "Billing",
        "agent-description": "Answers billing questions.",
        "agent-visibility": Visibility.TEAM,
    }
    response = client_in.post(agent_url(made), form, follow=True)
    assert response.redirect_chain == [(detail_url(made), 302)]
    assert flashed(response) == ["Saved as a new agent, Billing."]
    billing = Agent.objects.get(name="Billing")
    assert (billing.owner, billing.visibility) == (user, Visibility.TEAM)
    assert billing.description == "Answers billing questions."
    made.refresh_from_db()
    assert made.agent_version == billing.published and made.changed_from() is None
    page = response.content.decode()
    assert ">Billing v1</a>" in page and "changed from" not in page


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("Support", "An agent with this name already exists."),
        ("default", "“Default” is the built-in agent (the server's own settings): choose another"),
        ("", "Name: This field is required."),
        ("Sup@port", "An agent's name cannot hold “@”: NAME@N names its version N."),
    ],
)
def test_a_refused_agent_is_one_line_and_the_form_is_kept(
    client_in: Client, user: Any, name: str, line: str
) -> None:
    made = changed(user, support_of(make.user("bob")))
    before = stored()
    form = {
        "agent-name": name,
        "agent-description": "Kept as typed.",
        "agent-visibility": Visibility.TEAM,
    }
    response = client_in.post(agent_url(made), form)
    assert response.status_code == 422
    (shown,) = flashed(response)
    assert shown.startswith(line)
    assert stored() == before
    page = response.content.decode()
    assert ">\nKept as typed.</textarea>" in page
    assert 'value="team" id="id_agent-visibility_1" required checked>' in page


def test_a_reader_saves_a_shared_conversation_as_an_agent_of_theirs(
    client_in: Client, user: Any
) -> None:
    bob = make.user("bob")
    support = support_of(bob)
    theirs = changed(bob, support, shared=True)
    page = client_in.get(changes_url(theirs)).content.decode()
    assert escape(access.NOT_YOUR_AGENT) in page
    response = client_in.post(
        agent_url(theirs),
        {"agent-name": "Mine", "agent-visibility": Visibility.PRIVATE},
        follow=True,
    )
    assert response.redirect_chain == [(detail_url(theirs), 302)]
    assert flashed(response) == [
        "Saved as a new agent, Mine. This conversation still names what it started from: it "
        "is bob's."
    ]
    assert Agent.objects.get(name="Mine").owner == user
    theirs.refresh_from_db()
    assert theirs.agent_version == support.published and theirs.changed_from() is not None


def test_another_users_private_conversation_is_a_404(client_in: Client, user: Any) -> None:
    bob = make.user("bob")
    theirs = changed(bob, support_of(bob))
    before = stored()
    assert client_in.get(changes_url(theirs)).status_code == 404
    assert client_in.post(version_url(theirs), {"version-note": "x"}).status_code == 404
    form = {"agent-name": "Mine", "agent-visibility": Visibility.PRIVATE}
    assert client_in.post(agent_url(theirs), form).status_code == 404
    assert stored() == before


def test_saving_needs_login_post_and_csrf(user: Any) -> None:
    made = changed(user, support_of(user))
    before = stored()
    anonymous = Client()
    for url in (version_url(made), agent_url(made)):
        response = anonymous.post(url, {"agent-name": "Mine"})
        assert response.status_code == 302 and response["Location"].startswith("/login/")
    checked = Client(enforce_csrf_checks=True)
    checked.force_login(user)
    assert checked.post(version_url(made), {"version-note": "x"}).status_code == 403
    assert checked.post(agent_url(made), {"agent-name": "Mine"}).status_code == 403
    assert checked.get(version_url(made)).status_code == 405
    assert checked.get(agent_url(made)).status_code == 405
    assert stored() == before


def test_a_conversation_changed_from_default_can_be_saved_as_an_agent(
    client_in: Client, user: Any
) -> None:
    made = make.conversation(user, "Own settings", system_prompts=["Be brief."])
    assert made.agent_version is None
    page = client_in.get(detail_url(made)).content.decode()
    assert f'id="agent-label" href="{changes_url(made)}">changed from Default</a>' in page
    page = client_in.get(changes_url(made)).content.decode()
    assert "<h1>Changed from Default</h1>" in page
    assert '<a href="#save-agent">as a new agent</a>' in page
    assert "save-version" not in page
    assert client_in.post(version_url(made), {"version-note": "x"}).status_code == 404
    response = client_in.post(
        agent_url(made), {"agent-name": "Brief", "agent-visibility": Visibility.PRIVATE}
    )
    assert response.status_code == 302
    made.refresh_from_db()
    assert str(made.agent_version) == "Brief v1"
