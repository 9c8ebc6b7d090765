"""Tests of manage.py eval: cases replayed on a strict local provider from the terminal."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from chat.agent import decisions
from chat.evals import cases
from chat.models import Case, EvalResult, EvalRun, ModelCall, ProviderProfile
from chat.testing import evals as made_for
from chat.testing import factories as make
from chat.testing.openai_script import MODEL, error, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)

SEARCH = ("call_1", "search_cards", json.dumps({"query": made_for.QUESTION}))
OTHER_SEARCH = ("call_9", "search_cards", '{"query": "stop button"}')
TIME = ("call_2", "get_current_time", '{"timezone": "UTC"}')
KEY = "sk-eval-canary-5f1e"


@pytest.fixture
def owner() -> Any:
    return make.user()


@pytest.fixture
def case(owner: Any) -> Case:
    """The moment after "search the cards for pills", expecting search_cards as it was called,
    with the search's result recorded as a fixture."""
    return made_for.search_case(owner)


def on(server: FakeOpenAIServer) -> list[str]:
    return ["--base-url", server.base_url, "--model", MODEL]


def evaluate(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("eval", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def failing(*args: str) -> tuple[str, str, str]:
    """Output and error line of an evaluation that exits with status 1."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("eval", *args, stdout=out, stderr=err)
    line = str(caught.value)
    assert "\n" not in line and "Traceback" not in out.getvalue() + err.getvalue()
    return out.getvalue(), err.getvalue(), line


def test_a_case_that_passes(case: Case, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(tool_turn([SEARCH], usage=(50, 7)))

    out, _ = evaluate(*on(fake_openai))

    lines = out.splitlines()
    assert out.startswith("Rule: A case passes when the model's tool decision matches")
    assert out.count("A case passes when") == 1
    header = next(line for line in lines if line.startswith("CASE"))
    assert header.split() == ["CASE", "EXPECTED", "GOT", "VERDICT", "LATENCY", "TOKENS"]
    row = lines[lines.index(header) + 1]
    assert row.startswith(f"#{case.pk} {made_for.QUESTION}")
    assert row.split()[-4:-1] == ["passed", row.split()[-3], "s"] and row.endswith("  57")
    assert lines[-1].startswith("1 case, 1 attempt: 1 passed, 0 failed (100%) on fake-model in ")
    eval_run = EvalRun.objects.get()
    assert lines[-1].endswith(f" s; eval run {eval_run.pk}")
    (result,) = EvalResult.objects.all()
    assert ModelCall.objects.filter(run=result.run).exists()
    assert fake_openai.pending == 0
    assert result.run is not None and result.run.created_by is not None
    assert result.run.created_by.username == "cli"


def test_a_case_that_fails_exits_1_with_the_reason(
    case: Case, owner: Any, fake_openai: FakeOpenAIServer
) -> None:
    other = cases.save_case(
        case.conversation,  # type: ignore[arg-type]
        0,
        set_name="cards",
        user=owner,
        expected=decisions.expectation([("get_current_time", {"timezone": "Europe/Paris"})]),
        title="What time is it in Paris?",
    )
    # Both attempts start at once: each gets its own scripted answer, whichever comes first.
    fake_openai.enqueue(tool_turn([TIME]), tool_turn([TIME]))

    out, _, line = failing(*on(fake_openai), "--set", "cards")

    assert line == f"2 of 2 cases did not pass on fake-model (eval run {EvalRun.objects.get().pk})."
    lines = out.splitlines()
    rows = {row.split()[0]: row for row in lines if row.startswith("#")}
    assert "  failed  " in rows[f"#{case.pk}"] and "  failed  " in rows[f"#{other.pk}"]
    reasons = [row.strip() for row in lines if row.startswith("    ✗ ")]
    assert "✗ expected search_cards, got get_current_time" in reasons
    assert (
        '✗ get_current_time: arguments {"timezone": "UTC"} do not hold the expected '
        '{"timezone": "Europe/Paris"}'
    ) in reasons
    assert lines[-1].startswith("2 cases, 2 attempts: 0 passed, 2 failed (0%) on fake-model")
    for result in EvalResult.objects.all():
        assert ModelCall.objects.filter(run=result.run).exists()


def test_repeat_shows_the_pass_rate_and_each_failing_attempt(
    case: Case, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.enqueue(tool_turn([SEARCH]), text_turn("No tool needed."), tool_turn([SEARCH]))

    out, _, line = failing(*on(fake_openai), "--repeat", "3")

    assert line.startswith("1 of 1 case did not pass on fake-model")
    lines = out.splitlines()
    (row,) = [row for row in lines if row.startswith(f"#{case.pk} ")]
    assert "  2/3 passed  " in row
    assert "… x2, no tool x1  " in row
    (reason,) = [row for row in lines if row.startswith("    ✗ ")]
    assert reason.startswith("    ✗ attempt ")
    assert reason.endswith(": expected search_cards, got no tool call")
    assert lines[-1].startswith("1 case, 3 attempts: 2 passed, 1 failed (67%)")
    assert fake_openai.pending == 0


def test_continue_answers_the_tool_call_from_the_fixtures(
    case: Case, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.enqueue(tool_turn([SEARCH]), text_turn("The pills card says so."))

    out, _ = evaluate(*on(fake_openai), "--continue", "--json")

    second = fake_openai.requests[-1].body["messages"]
    assert second[-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": case.fixtures[0]["content"],
    }
    assert fake_openai.pending == 0
    (reported,) = json.loads(out)["cases"]
    assert reported["verdict"] == "passed"
    assert reported["attempts"][0]["answer"] == "The pills card says so."
    result = EvalResult.objects.get()
    assert ModelCall.objects.filter(run=result.run).count() == 2


def test_continue_with_a_fixture_missing_tells_the_model(
    case: Case, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.enqueue(tool_turn([OTHER_SEARCH]), text_turn("I could not look that up."))

    out, _, _ = failing(*on(fake_openai), "--continue")

    answered = fake_openai.requests[-1].body["messages"][-1]
    assert answered["role"] == "tool" and answered["tool_call_id"] == "call_9"
    assert "no recorded result for search_cards" in json.loads(answered["content"])["error"]
    assert fake_openai.pending == 0
    assert "✗ search_cards: arguments" in out


def test_json_shape_and_output_file(
    case: Case, owner: Any, fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    cases.save_case(
        case.conversation,  # type: ignore[arg-type]
        0,
        set_name="cards",
        user=owner,
        expected=dict(decisions.NO_TOOL),
        title="No tool",
    )
    fake_openai.enqueue(*[tool_turn([SEARCH], usage=(10, 2))] * 4)
    path = tmp_path / "report.json"

    out, err, line = failing(*on(fake_openai), "--repeat", "2", "--json", "--output", str(path))

    document = json.loads(out)
    assert json.loads(path.read_text()) == document
    assert "Rule:" not in out and err == ""
    eval_run = EvalRun.objects.get()
    assert line == f"1 of 2 cases did not pass on fake-model (eval run {eval_run.pk})."
    assert set(document) == {
        "eval_run", "model", "label", "agent", "set", "repeat", "continue", "status", "rule",
        "cases", "passed", "failed", "duration",
    }  # fmt: skip
    assert document["agent"] is None
    assert (document["eval_run"], document["model"], document["rule"]) == (
        eval_run.pk,
        MODEL,
        decisions.RULE,
    )
    assert (document["passed"], document["failed"], document["repeat"]) == (1, 1, 2)
    first, second = document["cases"]
    assert set(first) == {
        "case", "case_id", "title", "verdict", "expected", "got", "attempts", "pass_rate",
        "latency", "tokens", "reason",
    }  # fmt: skip
    assert (first["case"], first["case_id"], first["title"]) == (
        f"cards #{case.pk}",
        case.pk,
        made_for.QUESTION,
    )
    assert (first["verdict"], first["pass_rate"], first["tokens"], first["reason"]) == (
        "passed",
        1.0,
        12,
        "",
    )
    assert first["expected"] == first["got"] == case.expected
    assert [a["verdict"] for a in first["attempts"]] == ["passed", "passed"]
    assert isinstance(first["latency"], float)
    assert (second["verdict"], second["pass_rate"], second["expected"]) == (
        "failed",
        0.0,
        {"no_tool": True},
    )
    assert second["reason"] == "expected no tool call, got search_cards"
    attempt = second["attempts"][0]
    assert set(attempt) == {
        "attempt", "verdict", "reason", "got", "answer", "latency", "prompt_tokens",
        "completion_tokens", "gated_calls", "run",
    }  # fmt: skip
    assert (attempt["verdict"], attempt["prompt_tokens"], attempt["completion_tokens"]) == (
        "failed",
        10,
        2,
    )
    assert ModelCall.objects.filter(run_id=attempt["run"]).exists()


def test_the_output_file_is_written_without_json_too(
    case: Case, fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_openai.enqueue(tool_turn([SEARCH]))
    path = tmp_path / "report.json"
    out, _ = evaluate(*on(fake_openai), "--output", str(path))
    assert "Rule:" in out
    assert json.loads(path.read_text())["cases"][0]["verdict"] == "passed"


@pytest.mark.parametrize(
    ("responses", "reason"),
    [
        ([error(400, "model not found")], "HTTP 400: model not found"),
        ([error(500, "upstream is down")] * 3, "HTTP 500: upstream is down"),
    ],
)
def test_a_provider_error_is_an_error_verdict(
    case: Case, fake_openai: FakeOpenAIServer, responses: list[Any], reason: str
) -> None:
    fake_openai.enqueue(*responses)

    out, err, line = failing(*on(fake_openai))

    assert line.startswith("1 of 1 case did not pass on fake-model")
    (row,) = [row for row in out.splitlines() if row.startswith(f"#{case.pk} ")]
    assert "  error  " in row and "  —  " in row
    assert f"    ✗ {reason}" in out
    assert "0 passed, 0 failed, 1 error (0%)" in out
    (result,) = EvalResult.objects.all()
    assert result.verdict == "error"
    assert ModelCall.objects.filter(run=result.run).exists()
    assert fake_openai.pending == 0
    if "500" in reason:
        assert "… retrying (1 of 2)" in err and "… retrying (2 of 2)" in err


def test_the_api_key_is_sent_and_never_printed_nor_stored(
    case: Case, fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_openai.enqueue(tool_turn([SEARCH]), tool_turn([SEARCH]))
    path = tmp_path / "report.json"

    table_out, table_err = evaluate(*on(fake_openai), "--api-key", KEY, "--output", str(path))
    json_out, json_err = evaluate(*on(fake_openai), "--api-key", KEY, "--json")

    assert [r.headers["authorization"] for r in fake_openai.requests] == [f"Bearer {KEY}"] * 2
    said = table_out + table_err + json_out + json_err + path.read_text()
    assert KEY not in said
    for eval_run in EvalRun.objects.all():
        assert KEY not in json.dumps([eval_run.label, eval_run.base_url, eval_run.error])
    for call in ModelCall.objects.all():
        assert KEY not in json.dumps(call.request) + call.error


def test_a_progress_bar_on_stderr(case: Case, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.enqueue(tool_turn([SEARCH]), tool_turn([SEARCH]))
    out, err = evaluate(*on(fake_openai), "--repeat", "2", "--progress")
    assert "Evaluating [" in err and "2/2 attempts" in err and err.endswith("\n")
    assert "Evaluating" not in out


def test_a_profile_by_name(case: Case, fake_openai: FakeOpenAIServer) -> None:
    ProviderProfile.objects.create(
        name="local",
        base_url=fake_openai.base_url,
        model=MODEL,
        api_key_env="",
        available_to_everyone=True,
    )
    fake_openai.enqueue(tool_turn([SEARCH]))

    out, _ = evaluate("--profile", "local")

    assert "1 passed, 0 failed (100%) on fake-model (local) in" in out
    assert EvalRun.objects.get().profile is not None


def test_refusals_are_one_line_and_replay_nothing(
    case: Case, fake_openai: FakeOpenAIServer
) -> None:
    ProviderProfile.objects.create(
        name="team", base_url=fake_openai.base_url, model=MODEL, available_to_everyone=False
    )
    refusals = [
        (["--profile", "nope"], "No provider profile named 'nope' (profiles: team)."),
        (["--profile", "team"], "'cli' may not use the provider profile 'team'"),
        (["--profile", "team", "--base-url", fake_openai.base_url], "choose one"),
        (["--set", "nope"], "No case set named 'nope' (manage.py cases list)."),
        (["--base-url", fake_openai.base_url], "AGENTLAB_MODEL"),
        ([*on(fake_openai), "--repeat", "0"], "--repeat takes 1 to 100 attempts per case."),
        ([*on(fake_openai), "--user", "ghost"], "No user named 'ghost'"),
        ([*on(fake_openai), "--output", "/nonexistent/report.json"], "Cannot write"),
    ]
    for args, reason in refusals:
        out, _, line = failing(*args)
        assert reason in line, args
        assert out == "", args
    assert fake_openai.requests == []
    assert not EvalRun.objects.exists()


def test_no_cases_is_refused() -> None:
    _, _, line = failing()
    assert line.startswith("No cases yet: keep one with manage.py cases add")
