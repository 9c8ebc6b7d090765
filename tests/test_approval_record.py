"""A tool call's approval in words: the record's sentences, and where they show (the pill
details and the inspector), for runs decided through the real flow."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chat import approval_record
from chat.models import Conversation, Run, ToolCall
from chat.testing import approvals as flow
from chat.testing.openai_server import FakeOpenAIServer

T0 = datetime(2026, 12, 1, 14, 2, tzinfo=UTC)


def asked(approval: str, waited: float = 180, **fields: Any) -> ToolCall:
    return ToolCall(
        name="handoff_note",
        arguments=flow.NOTE,
        policy="ask",
        approval=approval,
        asked_at=T0 - timedelta(seconds=waited),
        decided_at=T0,
        **fields,
    )


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0.2, "within a second"), (40, "40 s"), (180, "3 min"), (3600, "1 h"), (7500, "2 h 5 min")],
)
def test_a_wait_reads_as_people_say_it(seconds: float, said: str) -> None:
    assert approval_record.span(seconds) == said


def test_each_decision_in_one_sentence(settings: Any) -> None:
    settings.AGENTLAB_APPROVAL_TIMEOUT = 86400
    record = approval_record.record
    by = {"decided_by_name": "ada"}

    approved = record(asked("approved", **by))
    assert approved is not None
    assert approved.text == "Asked first · approved by ada at 1 Dec 14:02 after 3 min"
    denied = record(asked("denied", decision_reason="not before Friday", **by))
    assert denied is not None and denied.text.endswith("after 3 min: not before Friday")
    assert "denied by ada at" in denied.text
    always = record(asked("always", **by))
    assert always is not None and always.text.endswith("and always allowed in this conversation")
    expired = record(
        asked("expired", decision_reason="no decision within 24 hours (AGENTLAB_APPROVAL_TIMEOUT)")
    )
    assert expired is not None
    assert expired.text == (
        "Asked first · expired: no decision within 24 hours (AGENTLAB_APPROVAL_TIMEOUT)"
    )
    stopped = record(asked("stopped", **by))
    assert stopped is not None and stopped.text.endswith(
        "stopped by ada at 1 Dec 14:02 before a decision"
    )
    edited = record(asked("edited", edited_arguments=flow.EDITED, **by))
    assert edited is not None and "edited and approved by ada" in edited.text
    assert '"note": "ship it"' in edited.before and '"recipient": "ops"' in edited.after


def test_a_call_that_did_not_ask_says_its_policy_and_a_replay_says_nothing() -> None:
    ran = approval_record.record(ToolCall(name="get_current_time", policy="run"))
    never = approval_record.record(ToolCall(name="search_cards", policy="never"))
    assert ran is not None and ran.text == "Ran without asking (policy: run)"
    assert never is not None and never.text == "Never run (policy: never)"
    assert approval_record.record(ToolCall(name="search_cards")) is None


def test_a_waiting_call_says_since_when_today() -> None:
    now = timezone.now()
    call = ToolCall(name="handoff_note", policy="ask", approval="waiting", asked_at=now)
    record = approval_record.record(call)
    local = timezone.localtime(now).strftime("%H:%M")
    assert record is not None and record.text == f"Asked first · waiting for approval since {local}"
    assert approval_record.waited(call, now + timedelta(minutes=3)) == 180


# Where the record shows: runs decided through the real flow.


@pytest.fixture
def decided(fake_openai: FakeOpenAIServer, user: Any) -> Conversation:
    return flow.conversation_with_decisions(fake_openai, user, waited=180)


def text_of(page: bytes) -> str:
    """The page's text, one space between words."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page.decode())))


def detail(client: Client, made: Conversation, call_id: str) -> str:
    call = ToolCall.objects.get(run__conversation=made, call_id=call_id)
    response = client.get(reverse("chat:tool_call_detail", args=[made.pk, call.pk]))
    assert response.status_code == 200
    return text_of(response.content)


@pytest.mark.django_db(transaction=True)
def test_the_pill_details_say_who_decided_what_and_when(
    client_in: Client, decided: Conversation
) -> None:
    approved = detail(client_in, decided, "a")
    assert re.search(r"Asked first · approved by ada at \d\d:\d\d after 3 min", approved)
    denied = detail(client_in, decided, "b")
    assert re.search(r"denied by ada at \d\d:\d\d after 3 min: not before Friday", denied)
    assert "Why it failed: The user denied this call: not before Friday" in denied
    assert "Ran without asking (policy: run)" in detail(client_in, decided, "t")
    assert "Never run (policy: never)" in detail(client_in, decided, "s")

    edited = detail(client_in, decided, "e")
    assert re.search(r"edited and approved by ada at \d\d:\d\d within a second", edited)
    before = edited.index("Arguments before the edit (the model's)")
    after = edited.index("Arguments after the edit (as it ran)")
    assert before < edited.index('"note": "ship it"') < after
    assert after < edited.index('"note": "ship it on Friday", "recipient": "ops"')


@pytest.mark.django_db(transaction=True)
def test_the_inspector_shows_each_calls_decision(client_in: Client, decided: Conversation) -> None:
    first, second, third = Run.objects.filter(conversation=decided).order_by("pk")
    pages = [
        text_of(client_in.get(reverse("chat:run_inspect", args=[decided.pk, run.pk])).content)
        for run in (first, second, third)
    ]

    assert re.search(r"approved by ada at \d\d:\d\d after 3 min", pages[0])
    assert "after 3 min: not before Friday" in pages[0]
    assert "Ran without asking (policy: run)" in pages[0]
    assert "Arguments after the edit (as it ran)" in pages[1]
    assert "Never run (policy: never)" in pages[2]
    picture = re.search(
        r'<svg class="waterfall waterfall-wide"[^>]* aria-label="([^"]*)"',
        str(
            client_in.get(reverse("chat:run_inspect", args=[decided.pk, first.pk])).content.decode()
        ),
    )
    assert picture is not None and picture.group(1).endswith(", waited 3 min for approval")
