"""The admin's record of approvals: each tool call's decision (read-only), runs that wait, the
filters, and the transcript with its decisions and wait bars."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import Client
from django.urls import reverse

from chat.models import Conversation, Run, ToolCall
from chat.testing import approvals as flow
from chat.testing import factories as make
from chat.testing.openai_script import tool_turn
from chat.testing.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)


def url(model: type, view: str, *args: object) -> str:
    return reverse(f"admin:chat_{model._meta.model_name}_{view}", args=args)


def text_of(page: bytes) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page.decode())))


@pytest.fixture
def decided(fake_openai: FakeOpenAIServer) -> Conversation:
    return flow.conversation_with_decisions(fake_openai, make.user("ada"), waited=180)


def call(made: Conversation, call_id: str) -> ToolCall:
    return ToolCall.objects.get(run__conversation=made, call_id=call_id)


def test_a_tool_calls_page_shows_its_decision_read_only(
    staff: Client, decided: Conversation
) -> None:
    denied = staff.get(url(ToolCall, "change", call(decided, "b").pk))
    page = text_of(denied.content)

    assert denied.status_code == 200 and b'name="_save"' not in denied.content
    assert re.search(
        r"Asked first · denied by ada at [\d: A-Za-z]+ after 3 min: not before Friday", page
    )
    assert "Ask first Approval record: Asked first" in page and "Approval: Denied" in page
    assert "Decision reason: not before Friday" in page
    user_link = reverse("admin:auth_user_change", args=[decided.owner.pk])
    assert f'href="{user_link}"' in denied.content.decode()

    edited = text_of(staff.get(url(ToolCall, "change", call(decided, "e").pk)).content)
    assert "Arguments after an edit (as it ran):" in edited
    assert '"recipient": "ops"' in edited and "edited and approved by ada" in edited
    assert "Ran without asking (policy: run)" in text_of(
        staff.get(url(ToolCall, "change", call(decided, "t").pk)).content
    )


def test_tool_calls_and_runs_filter_by_approval(staff: Client, decided: Conversation) -> None:
    listing = staff.get(url(ToolCall, "changelist") + "?approval__exact=denied").content.decode()
    assert "1 tool call" in listing and "Handoff note" in listing
    never = staff.get(url(ToolCall, "changelist") + "?policy__exact=never").content.decode()
    assert "1 tool call" in never and "Search cards" in never

    first, second, _ = Run.objects.filter(conversation=decided).order_by("pk")
    runs = staff.get(url(Run, "changelist") + "?approval=denied").content.decode()
    assert f">Run {first.pk} (completed)<" in runs and f">Run {second.pk} (" not in runs
    asked = staff.get(url(Run, "changelist") + "?approval=asked").content.decode()
    assert "2 runs" in asked
    assert staff.get(url(Run, "changelist") + "?approval=bogus").status_code == 200


def test_a_waiting_run_says_so_in_the_lists_and_on_its_page(
    staff: Client, fake_openai: FakeOpenAIServer
) -> None:
    made = flow.on_provider(fake_openai, make.user("ada"), "handoff_note")
    fake_openai.enqueue(tool_turn([("h", "handoff_note", flow.NOTE)]))
    run = async_to_sync(flow.waiting)(made)

    listing = text_of(staff.get(url(Run, "changelist")).content)
    assert "Waiting for approval" in listing
    waiting = text_of(staff.get(url(Run, "changelist") + "?status__exact=requires_action").content)
    assert "1 run" in waiting
    page = text_of(staff.get(url(Run, "change", run.pk)).content)
    assert "Waiting for approval" in page and "Waiting until" in page
    transcript = staff.get(url(Conversation, "change", made.pk)).content.decode()
    assert "waiting for approval until" in text_of(transcript.encode())
    assert re.search(
        r"Asked first · waiting for approval since \d\d:\d\d", text_of(transcript.encode())
    )
    assert 'class="wf-bar wf-wait wf-waiting"' in transcript
    assert "Waiting for approval for" in transcript


def test_the_transcript_shows_each_decision_and_the_wait(
    staff: Client, decided: Conversation
) -> None:
    page = staff.get(url(Conversation, "change", decided.pk))
    content = page.content.decode()
    said = text_of(page.content)

    assert page.status_code == 200
    assert re.search(r"approved by ada at [\d: A-Za-z]+ after 3 min", said)
    assert "after 3 min: not before Friday" in said
    assert "Ran without asking (policy: run)" in said
    assert "Never run (policy: never)" in said
    assert "The model's arguments, before the edit" in said
    bars = re.sub(r'<ul class="waterfall-legend".*?</ul>', "", content, flags=re.S)
    assert bars.count('class="wf-bar wf-wait wf-decided"') == 2 * 2  # two runs, two layouts
    assert "Waited 3 min for approval: Handoff note approved by ada" in said


def test_a_decider_without_an_account_here_is_shown_by_name(staff: Client, decided: Any) -> None:
    row = call(decided, "a")
    ToolCall.objects.filter(pk=row.pk).update(decided_by=None, decided_by_name="grace")
    page = text_of(staff.get(url(ToolCall, "change", row.pk)).content)
    assert ("approved by grace" in page and "Decided by: grace" in page) or "grace" in page
