"""An agent's page (chat/agents/page.py): per version the conversations that used it, the team's
marks and its evaluations, in a fixed number of queries; the suite and its form."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from chat import access, agents
from chat.models import (
    Agent,
    AgentVersion,
    Annotation,
    Case,
    CaseSet,
    Conversation,
    EvalRun,
    Purpose,
    Run,
    ToolCall,
    Visibility,
)
from chat.testing import factories as make

pytestmark = pytest.mark.django_db


def support_of(owner: Any, name: str = "Support", visibility: str = Visibility.TEAM) -> Agent:
    """A team agent with version 1, and no conversation started from it yet."""
    settings = make.conversation(owner, system_prompts=["You answer support questions."])
    made = agents.create_agent(name=name, conversation=settings, user=owner, visibility=visibility)
    Conversation.objects.filter(pk=settings.pk).update(agent_version=None)
    return made


def next_version(agent: Agent, owner: Any, temperature: float) -> AgentVersion:
    changed = make.conversation(
        owner, system_prompts=["You answer support questions."], temperature=temperature
    )
    made = agents.new_version(agent=agent, conversation=changed, user=owner, note="Warmer.")
    Conversation.objects.filter(pk=changed.pk).update(agent_version=None)
    return made


def chat(owner: Any, version: AgentVersion, title: str, **fields: Any) -> Conversation:
    return Conversation.objects.create(owner=owner, agent_version=version, title=title, **fields)


def marked(conversation: Conversation, author: Any, verdict: str, *, on_call: bool = False) -> None:
    run = Run.objects.create(conversation=conversation, status="completed")
    tool_call = ToolCall.objects.create(run=run, call_id="c1", name="search") if on_call else None
    Annotation.objects.create(author=author, run=run, tool_call=tool_call, verdict=verdict)


def evaluated(version: AgentVersion, passed: int, failed: int, **fields: Any) -> EvalRun:
    return EvalRun.objects.create(
        agent_version=version,
        set_name=fields.pop("set_name", "support cases"),
        label=str(version),
        status=fields.pop("status", "completed"),
        total=passed + failed,
        passed=passed,
        failed=failed,
        **fields,
    )


def page_of(client: Client, agent: Agent) -> Any:
    response = client.get(reverse("chat:agent_detail", args=[agent.slug]))
    assert response.status_code == 200
    return response


def row_of(response: Any, number: int) -> Any:
    return next(row for row in response.context["rows"] if row.version.number == number)


def test_a_version_counts_its_chats_and_lists_those_the_viewer_may_read(
    client_in: Client, user: Any
) -> None:
    bob = make.user("bob")
    support = support_of(bob)
    v1 = support.published
    assert v1 is not None
    v2 = next_version(support, bob, 0.3)
    chat(user, v2, "Mine, older")
    chat(bob, v2, "Bob's, shared", shared=True)
    chat(bob, v2, "Bob's, private")
    chat(user, v2, "Mine, newest")
    chat(bob, v2, "A replay", shared=True, purpose=Purpose.EVAL)
    chat(bob, v1, "Bob's on v1")

    response = page_of(client_in, support)
    two, one = row_of(response, 2), row_of(response, 1)
    assert two.conversation_count == 4
    assert [str(c) for c in two.conversations] == ["Mine, newest", "Bob's, shared", "Mine, older"]
    assert (one.conversation_count, one.conversations) == (1, ())
    page = response.content.decode()
    assert "4 conversations, 3 shown" in page
    assert "1 conversation, none shared with you" in page
    assert "Bob&#x27;s, private" not in page and "A replay" not in page
    mine = Conversation.objects.get(title="Mine, newest")
    assert (
        f'<a href="{reverse("chat:conversation_detail", args=[mine.pk])}">Mine, newest</a>' in page
    )


def test_only_the_most_recent_readable_conversations_are_listed(
    client_in: Client, user: Any
) -> None:
    support = support_of(user)
    for n in range(5):
        chat(user, support.published, f"Chat {n}")  # type: ignore[arg-type]
    row = row_of(page_of(client_in, support), 1)
    assert row.conversation_count == 5
    assert [str(c) for c in row.conversations] == ["Chat 4", "Chat 3", "Chat 2"]


def test_the_teams_marks_are_counted_per_version_on_replies_and_tool_calls(
    client_in: Client, user: Any
) -> None:
    bob = make.user("bob")
    support = support_of(bob)
    v2 = next_version(support, bob, 0.3)
    private = chat(bob, v2, "Bob's, private")
    shared = chat(bob, v2, "Bob's, shared", shared=True)
    marked(private, bob, "good")
    marked(shared, user, "good")
    marked(shared, bob, "bad", on_call=True)
    marked(shared, user, "good", on_call=True)
    marked(chat(bob, v2, "A replay", purpose=Purpose.EVAL), bob, "bad")
    marked(chat(bob, support.published, "On v1"), bob, "bad")  # type: ignore[arg-type]

    response = page_of(client_in, support)
    marks = row_of(response, 2).marks
    assert (marks.good_replies, marks.bad_replies, marks.good_calls, marks.bad_calls) == (
        2,
        0,
        1,
        1,
    )
    assert (row_of(response, 1).marks.good, row_of(response, 1).marks.bad) == (0, 1)
    page = response.content.decode()
    assert (
        '<span class="version-mark version-mark-good">Good 3</span> · '
        '<span class="version-mark version-mark-bad">Bad 1</span>' in page
    )
    assert "Replies: 2 good, 0 bad · Tool calls: 1 good, 1 bad" in page


def test_a_version_shows_its_latest_evaluations_with_links(client_in: Client, user: Any) -> None:
    support = support_of(user)
    v1 = support.published
    assert v1 is not None
    v2 = next_version(support, user, 0.3)
    evaluated(v2, 1, 4, set_name="oldest")
    latest = [evaluated(v2, n, 5 - n, set_name=f"suite {n}") for n in (2, 3, 4)]
    evaluated(v1, 3, 2, status="in_progress")
    EvalRun.objects.create(set_name="no version", label="gpt", total=1, passed=1)

    response = page_of(client_in, support)
    two, one = row_of(response, 2), row_of(response, 1)
    assert [run.set_name for run in two.evaluations] == ["suite 4", "suite 3", "suite 2"]
    assert (two.evaluation_count, one.evaluation_count) == (4, 1)
    page = response.content.decode()
    assert "4 evaluations, the latest 3 shown" in page
    run_url = reverse("chat:evals:run", args=[latest[-1].pk])
    assert f'<a href="{run_url}">suite 4</a>: 4 passed, 1 failed' in page
    assert "support cases</a>: 3 passed, 2 failed" in page
    assert "In progress" in page and "no version" not in page and "oldest" not in page


def test_a_private_agent_of_someone_else_has_no_page_and_no_suite_form(
    client_in: Client, user: Any
) -> None:
    secret = support_of(make.user("bob"), name="Secret", visibility=Visibility.PRIVATE)
    assert client_in.get(reverse("chat:agent_detail", args=[secret.slug])).status_code == 404
    response = client_in.post(reverse("chat:agent_suite", args=[secret.slug]), {"suite": ""})
    assert response.status_code == 404


def suite_with(name: str, cases: int) -> CaseSet:
    made = CaseSet.objects.create(name=name)
    for n in range(cases):
        Case.objects.create(
            case_set=made, title=f"Case {n}", messages=[], expected={"no_tool": True}
        )
    return made


def test_the_owner_attaches_replaces_and_detaches_the_suite(client_in: Client, user: Any) -> None:
    support = support_of(user)
    billing, returns = suite_with("billing", 2), suite_with("returns", 1)
    page = page_of(client_in, support).content.decode()
    assert "No suite: new versions are published without an evaluation." in page
    assert "No conversations, marks or evaluations yet." in page
    assert '<option value="" selected>No suite</option>' in page
    assert f'<option value="{billing.pk}">billing (2 cases)</option>' in page

    url = reverse("chat:agent_suite", args=[support.slug])
    response = client_in.post(url, {"suite": billing.pk, "require_suite_pass": "on"}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("chat:agent_detail", args=[support.slug]) + (
        "#suite"
    )
    support.refresh_from_db()
    assert (support.suite, support.require_suite_pass) == (billing, True)
    page = response.content.decode()
    assert (
        "Support is evaluated on “billing”: new versions must pass at least as many cases as the "
        "published one." in page
    )
    set_url = reverse("chat:evals:set", args=[billing.pk])
    assert f'evaluated on <a href="{set_url}">billing</a> (2 cases).' in page
    assert "published only if it passes at least as many cases" in page

    client_in.post(url, {"suite": returns.pk})
    support.refresh_from_db()
    assert (support.suite, support.require_suite_pass) == (returns, False)
    page = page_of(client_in, support).content.decode()
    assert "(1 case)." in page and "published whatever it passes" in page

    response = client_in.post(url, {"suite": ""}, follow=True)
    support.refresh_from_db()
    assert support.suite is None
    assert "Support has no suite now." in response.content.decode()


def test_a_case_set_that_is_gone_is_one_line_and_nothing_changes(
    client_in: Client, user: Any
) -> None:
    support = support_of(user)
    billing = suite_with("billing", 1)
    Agent.objects.filter(pk=support.pk).update(suite=billing)
    url = reverse("chat:agent_suite", args=[support.slug])
    response = client_in.post(url, {"suite": 999_999, "require_suite_pass": "on"}, follow=True)
    assert "That case set no longer exists: choose another." in response.content.decode()
    support.refresh_from_db()
    assert (support.suite, support.require_suite_pass) == (billing, False)


def test_a_team_member_who_may_not_change_the_agent_sees_no_form_and_is_refused(
    client_in: Client, user: Any
) -> None:
    support = support_of(make.user("bob"))
    billing = suite_with("billing", 1)
    response = page_of(client_in, support)
    assert response.context["suite_form"] is None
    assert 'action="/agents/support/suite/"' not in response.content.decode()

    url = reverse("chat:agent_suite", args=[support.slug])
    response = client_in.post(url, {"suite": billing.pk}, follow=True)
    assert access.NOT_YOUR_AGENT.replace("'", "&#x27;") in response.content.decode()
    support.refresh_from_db()
    assert support.suite is None

    user.user_permissions.add(Permission.objects.get(codename="change_agent"))
    client_in.post(url, {"suite": billing.pk})
    support.refresh_from_db()
    assert support.suite == billing


def test_the_suite_form_needs_a_login_and_a_post(client: Client, client_in: Client) -> None:
    support = support_of(make.user("bob"))
    url = reverse("chat:agent_suite", args=[support.slug])
    response = client.post(url, {"suite": ""})
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert client_in.get(url).status_code == 405


def test_the_page_reads_as_many_queries_for_fifty_versions_as_for_one(
    client_in: Client, user: Any, django_assert_max_num_queries: Any
) -> None:
    support = support_of(user)
    Agent.objects.filter(pk=support.pk).update(suite=suite_with("billing", 3))
    with CaptureQueriesContext(connection) as one:
        page_of(client_in, support)

    bob = make.user("bob")
    versions = [support.published] + [
        AgentVersion.objects.create(
            agent=support,
            number=n,
            parameters={"system_prompts": [f"Prompt {n}"], "temperature": n / 100},
            author=user,
        )
        for n in range(2, 51)
    ]
    chats = Conversation.objects.bulk_create(
        Conversation(owner=bob if n % 3 else user, agent_version=versions[n % 50], title=f"c{n}")
        for n in range(400)
    )
    runs = Run.objects.bulk_create(
        Run(conversation=conversation, status="completed") for conversation in chats[:200]
    )
    Annotation.objects.bulk_create(
        Annotation(author=bob, run=run, verdict="good" if n % 2 else "bad")
        for n, run in enumerate(runs)
    )
    EvalRun.objects.bulk_create(
        EvalRun(agent_version=versions[n % 50], set_name="billing", label="x", total=3, passed=2)
        for n in range(200)
    )
    with django_assert_max_num_queries(len(one)):
        response = page_of(client_in, support)
    assert len(response.context["rows"]) == 50
    assert sum(row.conversation_count for row in response.context["rows"]) == 400
