"""Agent versions as targets of the Run and Compare forms (chat/evals/forms.py): offered for
the agents a user may use, refused in one line otherwise, compared on an agent's suite (a strict
local provider deciding by the system prompt it receives), and the Compare page opened for an
agent (`?agent=<slug>`)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync
from django.test import AsyncClient
from django.urls import reverse

from chat import access, agents
from chat.evals import compare, forms
from chat.models import (
    Agent,
    AgentVersion,
    CaseSet,
    Comparison,
    EvalRun,
    ProviderProfile,
    Visibility,
)
from chat.testing import evals as made_for
from chat.testing import factories as make
from chat.testing.evals import settle
from chat.testing.openai_script import MODEL, ScriptedResponse, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.evals.test_views import alerts, asearch_case
from tests.test_security import audit

pytestmark = pytest.mark.django_db(transaction=True)

SEARCHING = "Search the cards before anything else."
TIMING = "Tell the time before anything else."
SEARCH = ("call_1", "search_cards", f'{{"query": "{made_for.QUESTION}"}}')
TIME = ("call_2", "get_current_time", '{"timezone": "UTC"}')


def by_prompt(body: Any) -> ScriptedResponse | None:
    """A strict provider that searches or tells the time as its system prompt says."""
    prompts = [m.get("content") for m in body["messages"] if m["role"] == "system"]
    if SEARCHING in prompts:
        return tool_turn([SEARCH])
    return tool_turn([TIME]) if TIMING in prompts else None


@pytest.fixture
def prompted(fake_openai: FakeOpenAIServer) -> FakeOpenAIServer:
    fake_openai.responder = by_prompt
    return fake_openai


def agent_of(
    owner: Any,
    name: str = "Support",
    *,
    prompts: tuple[str, ...] = (SEARCHING,),
    visibility: str = Visibility.TEAM,
    profile: ProviderProfile | None = None,
) -> Agent:
    """An agent whose published version 1 holds these system prompts and both tools."""
    settings = make.conversation(
        owner, system_prompts=list(prompts), enabled_tools=["search_cards", "get_current_time"]
    )
    settings.profile = profile
    settings.save()
    return agents.create_agent(name=name, conversation=settings, user=owner, visibility=visibility)


def next_version(agent: Agent, prompt: str, *, user: Any) -> AgentVersion:
    settings = make.conversation(
        user, system_prompts=[prompt], enabled_tools=["search_cards", "get_current_time"]
    )
    settings.profile = agent.versions.get(number=1).profile
    settings.save()
    return agents.new_version(agent=agent, conversation=settings, user=user)


def shared_profile(server: FakeOpenAIServer, name: str = "Local") -> ProviderProfile:
    return ProviderProfile.objects.create(
        name=name, base_url=server.base_url, api_key_env="", model=MODEL, available_to_everyone=True
    )


def options(page: str, group: str) -> list[str]:
    found = re.search(rf'<optgroup label="{group}">(.*?)</optgroup>', page, re.S)
    assert found, group
    return re.findall(r"<option [^>]*>([^<]*)</option>", found.group(1))


def compare_data(case_set: CaseSet, *values: str, **more: Any) -> dict[str, Any]:
    data: dict[str, Any] = {f"target_{n}": value for n, value in enumerate(values, start=1)}
    return data | {"case_set": case_set.pk, "repeat": 1} | more


def test_the_targets_offer_the_versions_of_the_agents_the_user_may_use() -> None:
    ada, bob = make.user("ada"), make.user("bob")
    support = agent_of(bob)
    next_version(support, TIMING, user=bob)
    agent_of(ada, "Ada's own", visibility=Visibility.PRIVATE)
    agent_of(bob, "Bob's secret", visibility=Visibility.PRIVATE)

    page = make.logged_in(ada).get(reverse("chat:evals:compare")).content.decode()

    assert options(page, "Agents") == [
        "Ada&#x27;s own v1 (published)",
        "Support v2",
        "Support v1 (published)",
    ]
    assert "Server default · Scripted model (offline)" in options(page, "Endpoints")
    assert "Bob&#x27;s secret" not in page
    v2 = AgentVersion.objects.get(agent=support, number=2)
    assert f'<option value="agent-{v2.pk}">Support v2</option>' in page
    assert page.count('<optgroup label="Agents">') == 3  # one list per target
    made_for.search_case(ada)  # the Run form shows once there is a set
    run_page = make.logged_in(ada).get(reverse("chat:evals:index")).content.decode()
    assert options(run_page, "Agents") == options(page, "Agents")


def test_without_agents_the_targets_are_the_endpoints_alone() -> None:
    page = make.logged_in(make.user("ada")).get(reverse("chat:evals:compare")).content.decode()
    assert "<optgroup" not in page
    assert (
        '<option value="default" selected>Server default · Scripted model (offline)</option>'
        in page
    )


def test_each_agent_offers_its_newest_versions_and_its_published_one(
    django_assert_max_num_queries: Any,
) -> None:
    ada = make.user("ada")
    support = agent_of(ada)
    for number in range(2, 15):
        AgentVersion.objects.create(
            agent=support, number=number, parameters={"system_prompts": [f"Rule {number}."]}
        )
    for name in ("Billing", "Triage", "Returns"):
        next_version(agent_of(ada, name), TIMING, user=ada)
    client = make.logged_in(ada)

    # However many agents and versions; one of them finds the case set to start with.
    with django_assert_max_num_queries(13):
        page = client.get(reverse("chat:evals:compare")).content.decode()

    offered = [label for label in options(page, "Agents") if label.startswith("Support")]
    assert offered == [f"Support v{n}" for n in range(14, 5, -1)] + ["Support v1 (published)"]
    assert len(offered) == forms.VERSIONS_OFFERED
    # An older version is not listed but may still be chosen.
    older = AgentVersion.objects.get(agent=support, number=3)
    form = forms.CompareForm(
        {"case_set": "", "target_1": f"agent-{older.pk}", "target_2": "default", "repeat": 1},
        user=ada,
    )
    assert not form.is_valid() and form.error == "Choose a case set."
    assert "target_1" not in form.errors


def test_a_private_agent_of_someone_else_is_refused_in_one_line() -> None:
    ada = make.user("ada")
    case = made_for.search_case(ada)
    secret = agent_of(make.user("bob"), "Secret", visibility=Visibility.PRIVATE)

    response = make.logged_in(ada).post(
        reverse("chat:evals:compare"),
        compare_data(case.case_set, "default", f"agent-{secret.published_id}"),
    )

    assert response.status_code == 422
    assert alerts(response.content.decode()) == [access.PRIVATE_AGENT]
    assert not Comparison.objects.exists() and not EvalRun.objects.exists()


def test_a_model_typed_beside_an_agent_version_is_refused() -> None:
    ada = make.user("ada")
    case = made_for.search_case(ada)
    support = agent_of(ada)

    response = make.logged_in(ada).post(
        reverse("chat:evals:index"),
        {
            "case_set": case.case_set_id,
            "target": f"agent-{support.published_id}",
            "model": "other-model",
            "repeat": 1,
        },
    )

    assert response.status_code == 422
    page = response.content.decode()
    assert alerts(page) == ["Support v1 brings its own model: leave the model empty."]
    assert 'value="other-model"' in page  # kept, as typed
    assert not EvalRun.objects.exists()


def test_a_deleted_version_is_refused_in_one_line() -> None:
    ada = make.user("ada")
    case = made_for.search_case(ada)
    support = agent_of(ada)
    draft = next_version(support, TIMING, user=ada)
    chosen = f"agent-{draft.pk}"
    AgentVersion.objects.filter(pk=draft.pk).delete()

    response = make.logged_in(ada).post(
        reverse("chat:evals:compare"),
        compare_data(case.case_set, f"agent-{support.published_id}", chosen),
    )

    assert response.status_code == 422
    assert alerts(response.content.decode()) == [forms.GONE]
    assert not Comparison.objects.exists()


def test_a_version_on_a_profile_the_user_may_not_use_is_refused_in_one_line(
    fake_openai: FakeOpenAIServer,
) -> None:
    ada = make.user("ada")
    case = made_for.search_case(ada)
    private = ProviderProfile.objects.create(
        name="Private", base_url=fake_openai.base_url, api_key_env="", model=MODEL
    )
    bob = make.user("bob", is_superuser=True)  # may use every profile
    support = agent_of(bob, profile=private)

    page = make.logged_in(ada).get(reverse("chat:evals:compare")).content.decode()
    assert "Support v1" not in page
    response = make.logged_in(ada).post(
        reverse("chat:evals:compare"),
        compare_data(case.case_set, "default", f"agent-{support.published_id}"),
    )
    assert alerts(response.content.decode()) == [
        "Support v1 uses a provider profile you may not use: choose another target."
    ]
    assert fake_openai.requests == []


def test_an_evaluation_of_an_agent_version_records_it(prompted: FakeOpenAIServer) -> None:
    ada = make.user("ada")
    case = made_for.search_case(ada)
    support = agent_of(ada, profile=shared_profile(prompted))

    response = make.logged_in(ada).post(
        reverse("chat:evals:index"),
        {"case_set": case.case_set_id, "target": f"agent-{support.published_id}", "repeat": 1},
    )

    assert response.status_code == 302
    eval_run = EvalRun.objects.get()
    assert eval_run.agent_version_id == support.published_id
    assert eval_run.label == f"Support v1 · {MODEL} (Local)" and eval_run.model == MODEL


async def test_two_versions_of_an_agent_decide_differently_on_its_suite(
    prompted: FakeOpenAIServer,
) -> None:
    ada = await sync(make.user)("ada")
    case = await asearch_case(ada)

    def support_with_two_versions() -> tuple[Agent, AgentVersion]:
        support = agent_of(ada, profile=shared_profile(prompted))
        support.suite = case.case_set
        support.save()
        return support, next_version(support, TIMING, user=ada)

    support, draft = await sync(support_with_two_versions)()
    client = AsyncClient()
    await client.aforce_login(ada)

    opened = await client.get(f"{reverse('chat:evals:compare')}?agent={support.slug}")
    initial = opened.context["form"].initial
    assert initial == {
        "case_set": case.case_set_id,
        "target_1": f"agent-{support.published_id}",
        "target_2": f"agent-{draft.pk}",
    }
    page = opened.content.decode()
    assert re.search(rf'<option value="agent-{draft.pk}" selected>Support v2</option>', page)
    response = await client.post(
        reverse("chat:evals:compare"), initial | {"target_3": "", "repeat": 1}
    )

    comparison = await Comparison.objects.aget()
    assert response.status_code == 302
    await settle()
    runs = [run async for run in comparison.eval_runs.order_by("pk")]
    assert [(run.label, run.agent_version_id, run.passed, run.failed) for run in runs] == [
        (f"Support v1 · {MODEL} (Local)", support.published_id, 1, 0),
        (f"Support v2 · {MODEL} (Local)", draft.pk, 0, 1),
    ]
    sent = sorted(
        [m["content"] for m in r.body["messages"] if m["role"] == "system"]
        for r in prompted.requests
    )
    assert sent == [[SEARCHING], [TIMING]]  # each version's own prompt, not the case's

    shown = await sync(compare.matrix)(comparison)
    (row,) = shown.rows
    assert row.differs and [cell.differs for cell in row.cells] == [True, True]
    matrix = (await client.get(response["Location"])).content.decode()
    assert "1 of 1 case decided differently" in matrix
    assert (
        f'<dd>Support v1 · {MODEL} (Local) <span class="muted">vs</span> '
        f"Support v2 · {MODEL} (Local)</dd>" in matrix
    )
    assert audit(matrix).problems == [] and " style=" not in matrix


def test_the_compare_page_for_an_agent_says_what_is_left_to_choose() -> None:
    ada = make.user("ada")
    lonely = agent_of(ada, "Lonely")
    client = make.logged_in(ada)

    page = client.get(f"{reverse('chat:evals:compare')}?agent={lonely.slug}").content.decode()
    assert "Lonely has no suite: choose a case set." in page
    assert "Lonely v1 is the only version you may replay: choose what to compare it with." in page
    assert re.search(rf'<option value="agent-{lonely.published_id}" selected>', page)

    secret = agent_of(make.user("bob"), "Secret", visibility=Visibility.PRIVATE)
    page = client.get(f"{reverse('chat:evals:compare')}?agent={secret.slug}").content.decode()
    assert "No agent “secret” that you may use." in page
    assert f"agent-{secret.published_id}" not in page
