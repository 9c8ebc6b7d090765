"""An agent judged by its own cases (chat/agents/suites.py): a version evaluated on its suite
replays each case's history with the version's prompts, pre-messages, tools and parameters
(the strict provider sees exactly those), two versions get different verdicts on one case, and
publishing goes through the suite's gate."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async as sync
from django.contrib.auth.models import User

from chat import agents
from chat.agents import suites
from chat.evals import replay
from chat.models import (
    Agent,
    AgentVersion,
    Case,
    EvalRun,
    Publication,
    ResultVerdict,
    Visibility,
)
from chat.runs import tasks
from chat.testing import factories as make
from chat.testing.agents import CLOCK_PROMPT, OLD_PROMPT, QUESTION, version_of
from chat.testing.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)


def evaluated(planned: suites.Planned, user: User) -> EvalRun:
    asyncio.run(replay.run_eval(planned.eval_run, planned.cases, planned.target, user=user))
    planned.eval_run.refresh_from_db()
    return planned.eval_run


def test_a_case_keeps_how_many_messages_its_preamble_is(support: Agent) -> None:
    case = Case.objects.get()
    assert case.preamble == 2
    assert [m["role"] for m in case.messages] == ["system", "user", "user"]


def test_two_versions_give_different_verdicts_and_the_provider_sees_each_version(
    support: Agent, ada: User, fake_openai: FakeOpenAIServer
) -> None:
    old = evaluated(suites.plan_evaluation(version_of(support, 1), user=ada), ada)
    new = evaluated(suites.plan_evaluation(version_of(support, 2), user=ada), ada)

    assert (old.passed, old.failed) == (0, 1)
    assert (new.passed, new.failed) == (1, 0)
    assert old.agent_version.number == 1 and new.agent_version.number == 2
    assert new.label.startswith("Support v2 · ")
    first, second = (r.body for r in fake_openai.requests if r.method == "POST")
    assert first["messages"] == [
        {"role": "system", "content": OLD_PROMPT},
        {"role": "user", "content": QUESTION},
    ]
    assert [t["function"]["name"] for t in first["tools"]] == ["search_cards"]
    assert second["messages"] == [
        {"role": "system", "content": CLOCK_PROMPT},
        {"role": "assistant", "content": "Ask me anything."},
        {"role": "user", "content": QUESTION},
    ]
    assert [t["function"]["name"] for t in second["tools"]] == ["get_current_time"]
    assert second["temperature"] == 0.2
    # The replay's conversation is the version's: its transcript holds the case's history.
    result = new.results.get()
    assert result.verdict == ResultVerdict.PASSED
    replayed = result.run.conversation
    assert replayed.agent_version.number == 2
    roles = list(replayed.messages.order_by("index").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool"]  # the question, the decision, "not run"
    assert replayed.agent_parameters().system_prompts == (CLOCK_PROMPT,)


def test_a_case_kept_before_its_preamble_was_counted_loses_its_system_messages(
    support: Agent, ada: User, fake_openai: FakeOpenAIServer
) -> None:
    Case.objects.update(
        preamble=None,
        messages=[
            {"role": "system", "content": "Old."},
            {"role": "user", "content": QUESTION},
        ],
    )
    evaluated(suites.plan_evaluation(version_of(support, 2), user=ada), ada)
    (sent,) = (r.body for r in fake_openai.requests if r.method == "POST")
    assert [m["content"] for m in sent["messages"]] == [
        CLOCK_PROMPT,
        "Ask me anything.",
        QUESTION,
    ]


def test_an_evaluation_is_refused_without_a_suite_or_for_an_agent_one_may_not_use(
    support: Agent, ada: User
) -> None:
    support.visibility = Visibility.PRIVATE
    support.save()
    with pytest.raises(agents.AgentRefused):
        suites.plan_evaluation(version_of(support, 2), user=make.user("bob"))
    support.suite = None
    support.save()
    with pytest.raises(agents.AgentRefused, match="Support has no suite"):
        suites.plan_evaluation(version_of(support, 2), user=ada)
    assert not EvalRun.objects.exists()


# Publishing through the suite -------------------------------------------------------------


def test_a_better_version_is_published_beside_the_published_ones_result(
    support: Agent, ada: User
) -> None:
    support.require_suite_pass = True
    support.save()
    publishing = suites.plan_publication(version_of(support, 2), user=ada)
    assert publishing is not None and publishing.baseline is not None

    outcome = suites.run_publication(publishing, user=ada)

    assert outcome == (
        "Published Support v2: it passed 1 of 1 cases; Support v1 passed 0 of 1 cases."
    )
    support.refresh_from_db()
    assert support.published.number == 2
    candidate = EvalRun.objects.get(pk=publishing.candidate.eval_run.pk)
    assert candidate.publishes and candidate.outcome == outcome
    assert candidate.baseline.agent_version.number == 1


def test_a_worse_version_is_not_published_when_the_agent_requires_the_suite(
    support: Agent, ada: User
) -> None:
    suites.run_publication(suites.plan_publication(version_of(support, 2), user=ada), user=ada)
    support.refresh_from_db()
    support.require_suite_pass = True
    support.save()

    publishing = suites.plan_publication(version_of(support, 1), user=ada)
    assert publishing is not None
    # v2's evaluation on exactly these cases is reused, not run again.
    assert publishing.baseline is None
    assert publishing.candidate.eval_run.baseline.agent_version.number == 2
    outcome = suites.run_publication(publishing, user=ada)

    assert outcome == (
        "Not published: Support v1 passed 0 of 1 cases, fewer than Support v2 (1 of 1 "
        "cases); Support requires at least as many."
    )
    support.refresh_from_db()
    assert support.published.number == 2
    assert Publication.objects.filter(version__number=1).count() == 1  # v1's first only


def test_without_the_requirement_a_worse_version_is_published_and_both_results_shown(
    support: Agent, ada: User
) -> None:
    suites.run_publication(suites.plan_publication(version_of(support, 2), user=ada), user=ada)
    outcome = suites.run_publication(
        suites.plan_publication(version_of(support, 1), user=ada), user=ada
    )
    assert outcome == (
        "Published Support v1: it passed 0 of 1 cases; Support v2 passed 1 of 1 cases."
    )


def test_a_version_published_meanwhile_is_not_overtaken(support: Agent, ada: User) -> None:
    publishing = suites.plan_publication(version_of(support, 2), user=ada)
    assert publishing is not None
    third = AgentVersion.objects.create(
        agent=support, number=3, profile=version_of(support, 1).profile, parameters={}, author=ada
    )
    agents.publish(version=third, user=ada)

    outcome = suites.run_publication(publishing, user=ada)

    assert outcome.startswith("Not published: another version of Support was published")
    support.refresh_from_db()
    assert support.published.number == 3


def test_publishing_without_a_suite_needs_no_evaluation_and_needs_the_change_right(
    support: Agent, ada: User
) -> None:
    with pytest.raises(agents.AgentRefused):
        suites.plan_publication(version_of(support, 2), user=make.user("bob"))
    with pytest.raises(agents.AgentRefused, match="already published"):
        suites.plan_publication(version_of(support, 1), user=ada)
    support.suite = None
    support.save()
    assert suites.plan_publication(version_of(support, 2), user=ada) is None
    assert not EvalRun.objects.exists()


async def test_a_publication_from_a_page_concludes_before_its_end_is_told(
    support: Agent, ada: User
) -> None:
    publishing = await sync(suites.plan_publication)(await sync(version_of)(support, 2), user=ada)
    assert publishing is not None
    task = suites.start_publication(publishing, user=ada)
    await asyncio.wait_for(task, 30)
    candidate = await EvalRun.objects.aget(pk=publishing.candidate.eval_run.pk)
    assert candidate.outcome.startswith("Published Support v2")
    assert not tasks.background
