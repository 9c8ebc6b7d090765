"""The agent page's buttons (chat/agents/actions.py): evaluate a version on the suite, publish
one (at once without a suite; with one, after its evaluation, whose page says what became of
it), each asking the rule."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async as sync
from django.contrib.auth.models import User
from django.test import AsyncClient
from django.urls import reverse

from chat.evals import fragments
from chat.models import Agent, Conversation, EvalRun, Visibility
from chat.testing import factories as make
from chat.testing.evals import settle

pytestmark = pytest.mark.django_db(transaction=True)


async def logged_in(user: Any) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


def url(name: str, number: int) -> str:
    return reverse(f"chat:agent_version_{name}", args=["support", number])


async def messages_of(client: AsyncClient, agent: Agent) -> str:
    page = await client.get(reverse("chat:agent_detail", args=[agent.slug]))
    return page.content.decode()


async def test_evaluating_a_version_goes_to_its_evaluation_page(support: Agent) -> None:
    bob = await sync(make.user)("bob")
    client = await logged_in(bob)  # the team's agent: anyone may evaluate it
    response = await client.post(url("evaluate", 2))
    eval_run = await EvalRun.objects.select_related("agent_version").aget()
    assert response.status_code == 302
    assert response["Location"] == reverse("chat:evals:run", args=[eval_run.pk])
    await settle()
    await eval_run.arefresh_from_db()
    assert (eval_run.status, eval_run.passed, eval_run.publishes) == ("completed", 1, False)
    page = (await client.get(response["Location"])).content.decode()
    assert "Support v2</a>" in page and "(its prompts, tools and parameters)" in page


async def test_publishing_through_the_suite_says_what_became_of_the_version(
    support: Agent, ada: User
) -> None:
    support.require_suite_pass = True
    await support.asave()
    client = await logged_in(ada)
    response = await client.post(url("publish", 2))
    candidate = await EvalRun.objects.filter(publishes=True).aget()
    assert response["Location"] == reverse("chat:evals:run", args=[candidate.pk])
    while_running = (await client.get(response["Location"])).content.decode()
    assert "eval-publication" in while_running
    await settle()
    await support.arefresh_from_db()
    assert support.published_id == candidate.agent_version_id
    page = (await client.get(response["Location"])).content.decode()
    assert "Published Support v2: it passed 1 of 1 cases; Support v1 passed 0 of 1 cases." in page
    assert "The evaluation of Support v1</a>" in page
    done = await EvalRun.objects.aget(pk=candidate.pk)
    assert fragments.finished_text(done).endswith(done.outcome)


async def test_publishing_without_a_suite_is_at_once(support: Agent, ada: User) -> None:
    support.suite = None
    await support.asave()
    client = await logged_in(ada)
    response = await client.post(url("publish", 2))
    assert response["Location"] == reverse("chat:agent_detail", args=["support"])
    assert "Published Support v2." in await messages_of(client, support)
    assert not await EvalRun.objects.aexists()


async def test_only_who_may_change_the_agent_publishes(support: Agent) -> None:
    client = await logged_in(await sync(make.user)("bob"))
    response = await client.post(url("publish", 2))
    assert response["Location"] == reverse("chat:agent_detail", args=["support"])
    page = await messages_of(client, support)
    assert "may not" in page or "Only" in page
    await support.arefresh_from_db()
    assert (await sync(lambda: support.published.number)()) == 1
    assert not await EvalRun.objects.aexists()


async def test_a_private_agent_of_someone_else_is_not_found(support: Agent) -> None:
    support.visibility = Visibility.PRIVATE
    await support.asave()
    client = await logged_in(await sync(make.user)("bob"))
    for name in ("evaluate", "publish"):
        assert (await client.post(url(name, 2))).status_code == 404
    assert not await EvalRun.objects.aexists()


async def test_the_buttons_take_posts_of_logged_in_users_only(support: Agent) -> None:
    anonymous = AsyncClient()
    response = await anonymous.post(url("evaluate", 2))
    assert response.status_code == 302 and "/login" in response["Location"]
    client = await logged_in(await sync(make.user)("bob"))
    assert (await client.get(url("evaluate", 2))).status_code == 405


async def test_saving_a_conversation_as_a_published_version_goes_through_the_suite(
    support: Agent, ada: User
) -> None:
    def changed() -> int:
        made = Conversation.objects.get(owner=ada, agent_version__number=2)
        made.set_agent_parameters(made.agent_parameters().changed(temperature=0.4))
        made.save()
        return made.pk

    pk = await sync(changed)()
    client = await logged_in(ada)
    response = await client.post(
        reverse("chat:conversation_save_version", args=[pk]),
        {"version-note": "Warmer.", "version-publish": "on"},
    )
    candidate = await EvalRun.objects.filter(publishes=True).aget()
    assert response["Location"] == reverse("chat:evals:run", args=[candidate.pk])
    await settle()
    await candidate.arefresh_from_db()
    assert candidate.outcome.startswith("Published Support v3: it passed 1 of 1 cases")
    await support.arefresh_from_db()
    assert support.published_id == candidate.agent_version_id
