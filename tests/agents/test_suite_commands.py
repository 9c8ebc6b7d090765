"""The suite from the terminal: `eval --agent NAME[@N]` (the agent's suite by default, exit 1
on a failing case) and `agents publish` through the suite's gate."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from chat.models import Agent, EvalRun

pytestmark = pytest.mark.django_db(transaction=True)


def command(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def refused(*args: str) -> str:
    with pytest.raises(CommandError) as raised:
        command(*args)
    return str(raised.value)


def test_eval_agent_replays_the_version_on_its_suite(support: Agent, ada: User) -> None:
    out, _ = command("eval", "--agent", "Support@2", "--user", "ada", "--no-progress")
    assert "get_current_time" in out and "passed" in out
    assert "on Support v2 · " in out.splitlines()[-1]
    eval_run = EvalRun.objects.get()
    assert (eval_run.agent_version.number, eval_run.set_name) == (2, "Support suite")


def test_eval_agent_exits_1_when_the_published_version_fails_a_case(
    support: Agent, ada: User
) -> None:
    said = refused("eval", "--agent", "Support", "--user", "ada", "--no-progress")
    assert said.startswith("1 of 1 case did not pass on Support v1 · ")


def test_eval_agent_json_names_the_version(support: Agent, ada: User) -> None:
    out, _ = command(
        "eval", "--agent", "Support@2", "--set", "Support suite", "--user", "ada", "--json"
    )
    document = json.loads(out)
    assert (document["agent"], document["passed"], document["failed"]) == ("Support v2", 1, 0)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--model", "other"], "leave out --model."),
        (["--profile", "local"], "leave out --profile."),
    ],
)
def test_eval_agent_refuses_another_endpoint(
    support: Agent, ada: User, extra: list[str], said: str
) -> None:
    line = refused("eval", "--agent", "Support@2", "--user", "ada", *extra)
    assert line.startswith("--agent replays on the version's own endpoint and model")
    assert line.endswith(said)
    assert not EvalRun.objects.exists()


def test_eval_agent_refuses_unknown_versions_and_an_agent_without_a_suite(
    support: Agent, ada: User
) -> None:
    assert refused("eval", "--agent", "Support@9", "--user", "ada") == (
        "Support has no version 9 (it has 1 to 2)."
    )
    assert refused("eval", "--agent", "Default", "--user", "ada").startswith(
        "The built-in Default has no suite"
    )
    support.suite = None
    support.save()
    assert refused("eval", "--agent", "Support@2", "--user", "ada").startswith(
        "Support has no suite"
    )
    assert not EvalRun.objects.exists()


def test_publish_runs_the_suite_first_and_shows_both_results(support: Agent, ada: User) -> None:
    support.require_suite_pass = True
    support.save()
    out, err = command("agents", "publish", "Support@2", "--user", "ada")
    assert "Evaluating Support v2 on the suite 'Support suite' (1 case) before publishing it" in err
    assert "Support v2: 1 of 1 cases passed (eval run " in err
    assert "Support v1: 0 of 1 cases passed (eval run " in err
    assert out.strip() == (
        "Published Support v2: it passed 1 of 1 cases; Support v1 passed 0 of 1 cases."
    )
    support.refresh_from_db()
    assert support.published.number == 2


def test_publish_refused_by_the_gate_exits_1_and_keeps_the_published_version(
    support: Agent, ada: User
) -> None:
    command("agents", "publish", "Support@2", "--user", "ada")
    support.refresh_from_db()
    support.require_suite_pass = True
    support.save()
    said = refused("agents", "publish", "Support@1", "--user", "ada")
    assert said.startswith("Not published: Support v1 passed 0 of 1 cases, fewer than Support v2")
    support.refresh_from_db()
    assert support.published.number == 2
