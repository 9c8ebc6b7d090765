"""Agents in the admin (chat/admin/agents.py): the list, the agent page with its versions and
who published which, a version's read-only page, and editing under the agents' rule."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from chat import agents
from chat.models import Agent, AgentVersion, CaseSet, Visibility
from chat.testing import factories as make

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert(1)</script>"


def url(model: type, view: str, *args: object) -> str:
    return reverse(f"admin:chat_{model._meta.model_name}_{view}", args=args)


def support(owner: User, *, versions: int = 2, **fields: Any) -> Agent:
    """Support with `versions` versions, the last one published (when there are two or more,
    after version 1 was)."""
    made = make.conversation(owner, "settings", system_prompts=["Answer for support."])
    agent = agents.create_agent(name="Support", conversation=made, user=owner, **fields)
    for number in range(2, versions + 1):
        made.set_agent_parameters(made.agent_parameters().changed(max_tokens=number))
        made.save()
        made_version = agents.new_version(
            agent=agent, conversation=made, user=owner, note=f"Tokens {number}"
        )
        agents.publish(version=made_version, user=owner)
    agent.refresh_from_db()
    return agent


def staff_member(name: str, *codenames: str) -> User:
    member = make.user(name, is_staff=True)
    member.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=member.pk)


def test_the_list_shows_owner_visibility_published_version_and_suite(staff: Client) -> None:
    ada = make.user("ada")
    suite = CaseSet.objects.create(name="support cases")
    agent = support(ada, visibility=Visibility.TEAM)
    Agent.objects.filter(pk=agent.pk).update(suite=suite)
    private = agents.create_agent(name="Billing", conversation=make.conversation(ada), user=ada)

    response = staff.get(url(Agent, "changelist"))

    rows = {row.pk: row for row in response.context["cl"].result_list}
    assert set(rows) == {agent.pk, private.pk}
    html = response.content.decode()
    assert f'href="{url(AgentVersion, "change", agent.published_id)}">v2</a>' in html
    assert "support cases" in html
    filtered = staff.get(url(Agent, "changelist"), {"visibility__exact": "team"})
    assert [row.pk for row in filtered.context["cl"].result_list] == [agent.pk]
    found = staff.get(url(Agent, "changelist"), {"q": "billing"})
    assert [row.pk for row in found.context["cl"].result_list] == [private.pk]


def test_the_agent_page_lists_versions_newest_first_and_who_published_which(
    staff: Client,
) -> None:
    ada = make.user("ada")
    agent = support(ada, versions=3, description=SCRIPT)

    html = staff.get(url(Agent, "change", agent.pk)).content.decode()

    versions = html.partition('id="versions-group"')[2].partition("</fieldset>")[0]
    links = re.findall(r">v(\d)</a>", versions)
    assert links == ["3", "2", "1"]
    assert versions.count('alt="True"') == 1  # the published one, v3
    assert "Tokens 3" in versions and "First version." in versions
    publications = html.partition('id="publications-group"')[2]
    assert re.findall(r">v(\d)</a>", publications)[:3] == ["3", "2", "1"]
    assert SCRIPT not in html and "&lt;script&gt;" in html


def test_a_version_page_is_read_only(staff: Client) -> None:
    agent = support(make.user("ada"))
    version = agent.versions.get(number=1)

    page = staff.get(url(AgentVersion, "change", version.pk))
    posted = staff.post(url(AgentVersion, "change", version.pk), {"note": "rewritten"})

    assert page.status_code == 200 and b'name="_save"' not in page.content
    assert "Answer for support." in page.content.decode()
    assert posted.status_code == 403
    assert staff.get(url(AgentVersion, "add")).status_code == 403
    assert staff.post(url(AgentVersion, "delete", version.pk)).status_code == 403
    version.refresh_from_db()
    assert version.note == "First version."


def test_agents_are_not_added_here(staff: Client) -> None:
    assert staff.get(url(Agent, "add")).status_code == 403


def inlines(agent: Agent) -> dict[str, int]:
    """The management forms of the page's read-only inlines, as a browser posts them back."""
    counts = {"versions": agent.versions.count(), "publications": agent.publications.count()}
    return {
        f"{prefix}-{field}": count
        for prefix, count in counts.items()
        for field in ("TOTAL_FORMS", "INITIAL_FORMS")
    }


def edit(web: Client, agent: Agent, **changes: Any) -> int:
    data = {
        "name": agent.name,
        "description": agent.description,
        "visibility": agent.visibility,
        "suite": "",
        **inlines(agent),
        **changes,
    }
    return web.post(url(Agent, "change", agent.pk), data).status_code


@pytest.mark.parametrize(
    ("visibility", "who", "status", "saved"),
    [
        (Visibility.PRIVATE, "owner as staff", 302, True),
        (Visibility.PRIVATE, "superuser", 403, False),
        (Visibility.PRIVATE, "staff with change", 403, False),
        (Visibility.TEAM, "superuser", 302, True),
        (Visibility.TEAM, "staff with change", 302, True),
        (Visibility.TEAM, "staff who may view", 403, False),
    ],
)
def test_editing_an_agent_follows_the_agents_rule(
    visibility: str, who: str, status: int, saved: bool
) -> None:
    ada = staff_member("ada", "view_agent", "change_agent")
    agent = support(ada, visibility=visibility)
    users = {
        "owner as staff": lambda: ada,
        "superuser": lambda: make.user("root", is_staff=True, is_superuser=True),
        "staff with change": lambda: staff_member("sam", "view_agent", "change_agent"),
        "staff who may view": lambda: staff_member("vic", "view_agent"),
    }
    web = make.logged_in(users[who]())

    page = web.get(url(Agent, "change", agent.pk))
    assert page.status_code == 200
    assert (b'name="_save"' in page.content) is saved
    assert edit(web, agent, description="Answers customers.") == status
    agent.refresh_from_db()
    assert (agent.description == "Answers customers.") is saved


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"description": "a NUL \x00"}, "Null characters are not allowed."),
        ({"name": "default"}, "is the built-in agent"),
        ({"name": "Support@2"}, "cannot hold “@”"),
    ],
)
def test_what_the_gate_and_the_name_rule_refuse_is_one_error_and_nothing_saved(
    staff: Client, changes: dict[str, str], error: str
) -> None:
    agent = support(make.user("ada"), visibility=Visibility.TEAM)
    data = {"name": "Support", "visibility": "team", **inlines(agent), **changes}
    response = staff.post(url(Agent, "change", agent.pk), data)
    assert response.status_code == 200
    assert error in response.content.decode()
    stored = Agent.objects.get(pk=agent.pk)
    assert (stored.name, stored.description, stored.slug) == ("Support", "", "support")


def test_renaming_keeps_the_slug(staff: Client) -> None:
    agent = support(make.user("ada"), visibility=Visibility.TEAM)
    assert edit(staff, agent, name="Support desk") == 302
    agent.refresh_from_db()
    assert (agent.name, agent.slug) == ("Support desk", "support")


def test_deleting_an_agent_takes_its_versions(staff: Client) -> None:
    agent = support(make.user("ada"))
    confirm = staff.get(url(Agent, "delete", agent.pk))
    assert confirm.status_code == 200 and "Support v2" in confirm.content.decode()
    assert staff.post(url(Agent, "delete", agent.pk), {"post": "yes"}).status_code == 302
    assert not Agent.objects.exists() and not AgentVersion.objects.exists()


def test_the_pages_run_a_fixed_number_of_queries(staff: Client) -> None:
    ada = make.user("ada")
    agent = support(ada, versions=2, visibility=Visibility.TEAM)

    def counted() -> list[int]:
        pages = [url(Agent, "changelist"), url(Agent, "change", agent.pk)]
        pages.append(url(AgentVersion, "changelist"))
        counts = []
        for page in pages:
            staff.get(page)  # warm: content types are cached once per process
            with CaptureQueriesContext(connection) as queries:
                assert staff.get(page).status_code == 200
            counts.append(len(queries))
        return counts

    few = counted()
    made = make.conversation(ada)
    for number in range(3, 7):
        made.set_agent_parameters(made.agent_parameters().changed(top_p=number / 10))
        made.save()
        agents.publish(
            version=agents.new_version(agent=agent, conversation=made, user=ada), user=ada
        )
    agents.create_agent(name="Billing", conversation=make.conversation(ada), user=ada)
    assert counted() == few
