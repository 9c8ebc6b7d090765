"""Tests of chat.models: the rules about one row on the model, about many on the QuerySet."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from chat.agent.scripted import SCRIPTED_LABEL
from chat.models import Conversation, Run, RunStatus, ToolCall, ToolCallStatus, title_from
from chat.testing import factories as make

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("  What time\n is it?  ", "What time is it?"),
        ("x" * 60, "x" * 60),
        ("word " * 20, ("word " * 12).strip() + "…"),
    ],
)
def test_title_from_a_first_message(text: str, title: str) -> None:
    assert title_from(text) == title
    assert len(title_from(text)) <= 60


def test_for_user_is_the_security_boundary() -> None:
    ada, bob = make.user("ada"), make.user("bob")
    mine = make.conversation(ada, "mine")
    make.conversation(bob, "theirs")
    assert list(Conversation.objects.for_user(ada)) == [mine]
    assert list(Conversation.objects.for_user(AnonymousUser())) == []


def test_in_progress_runs_and_tool_calls() -> None:
    made = make.conversation(make.user(), "busy")
    done = Run.objects.create(conversation=made, status=RunStatus.COMPLETED)
    live = Run.objects.create(conversation=made)
    ToolCall.objects.create(run=live, call_id="a", name="t")
    ToolCall.objects.create(run=live, call_id="b", name="t", status=ToolCallStatus.COMPLETED)
    assert list(Run.objects.in_progress()) == [live]
    assert list(made.runs.in_progress()) == [live]
    assert [call.call_id for call in ToolCall.objects.in_progress()] == ["a"]
    assert made.has_unfinished_run()
    assert not Run.objects.in_progress().filter(pk=done.pk).exists()


def test_the_database_allows_one_run_in_progress_per_conversation() -> None:
    made = make.conversation(make.user(), "busy")
    Run.objects.create(conversation=made)
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(conversation=made)


def test_with_active_run_and_with_stats_annotate_without_multiplying_rows() -> None:
    owner = make.user()
    rich = make.rich_conversation(owner)
    quiet = make.conversation(owner, "quiet")
    Run.objects.create(conversation=quiet)
    rows = {row.pk: row for row in Conversation.objects.with_active_run().with_stats()}
    assert (rows[rich.pk].has_active_run, rows[quiet.pk].has_active_run) == (False, True)
    assert (rows[rich.pk].run_count, rows[rich.pk].tool_call_count) == (2, 2)
    assert rows[rich.pk].total_tokens == sum(run.total_tokens for run in rich.runs.all())
    assert (rows[quiet.pk].run_count, rows[quiet.pk].tool_call_count) == (1, 0)


def test_for_export_fetches_everything_in_a_fixed_number_of_queries() -> None:
    owner = make.user()
    for number in range(3):
        make.rich_conversation(owner, title=f"rich {number}")

    def read_all() -> int:
        with CaptureQueriesContext(connection) as queries:
            for conversation in Conversation.objects.for_export(full=True):
                for run in conversation.runs.all():
                    list(run.tool_calls.all())
                    list(run.model_calls.all())
                list(conversation.messages.all())
                list(conversation.history_repairs.all())
                conversation.owner.get_username()
        return len(queries)

    few = read_all()
    make.rich_conversation(owner, title="one more")
    assert read_all() == few


def test_agent_parameters_keep_chosen_tools_not_available_here() -> None:
    made = make.conversation(make.user(), "old tools")
    made.parameters = {"enabled_tools": ["get_current_time", "gone_tool"]}
    parameters = made.agent_parameters()
    assert parameters.enabled_tools == ("get_current_time", "gone_tool")
    assert parameters.unavailable_tools() == ("gone_tool",)
    # A change keeps them; a new choice of a tool nobody has is still refused.
    assert parameters.changed(temperature=1).enabled_tools == ("get_current_time", "gone_tool")
    with pytest.raises(ValueError, match="unknown tool"):
        parameters.changed(enabled_tools=["gone_tool", "never_was"])


def test_usage_text_of_a_run() -> None:
    run = Run(prompt_tokens=1200, completion_tokens=34, total_tokens=1234)
    assert run.usage_text() == "1,200 prompt + 34 completion = 1,234 tokens"


def test_tool_call_display_name_and_run_model_label() -> None:
    assert ToolCall(name="search_cards").display_name == "Search cards"
    assert Run(model="scripted").model_label == SCRIPTED_LABEL
    assert Run(model="gpt-x").model_label == "gpt-x"


def test_a_conversation_without_a_title_is_named_by_its_id() -> None:
    made = Conversation.objects.create(owner=User.objects.create(username="z"))
    assert str(made) == f"Conversation {made.pk}"


def test_failure_kinds_match_the_stored_choices() -> None:
    from chat.agent.tools import FAILURE_KINDS
    from chat.models import ToolFailure

    assert set(FAILURE_KINDS) == set(ToolFailure.values)
