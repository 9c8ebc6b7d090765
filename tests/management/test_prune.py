"""manage.py prune: raw streams older than N days are dropped (requests and transcripts kept),
the call says when, and the inspector and the admin say so in the stream's place."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chat.agent.scripted import ScriptedChatClient
from chat.agent.wire import encode_body, payload_sha256
from chat.models import Conversation, ModelCall, Run
from chat.testing import factories as make

pytestmark = pytest.mark.django_db(transaction=True)


def prune(*args: str) -> str:
    out = StringIO()
    call_command("prune", *args, stdout=out)
    return out.getvalue().strip()


def aged(owner: Any) -> tuple[Conversation, Run, Run]:
    """A conversation with a run 40 days old and one from today, both with raw streams."""
    made = make.conversation(owner, enabled_tools=["get_current_time"])
    old = make.run_turn(made, "What time is it?", ScriptedChatClient())
    new = make.run_turn(made, "And now?", ScriptedChatClient(["Later."]))
    ModelCall.objects.filter(run=old).update(started_at=timezone.now() - timedelta(days=40))
    return made, old, new


def test_prune_drops_old_raw_streams_only_and_keeps_requests(settings: Any) -> None:
    settings.AGENTLAB_KEEP_RAW_DAYS = 30
    made, old, _ = aged(make.user())
    before = {
        call.pk: (encode_body(call.request), call.raw_stream) for call in ModelCall.objects.all()
    }
    assert all(raw for _, raw in before.values())
    messages = list(made.messages.values_list("content", flat=True))

    said = prune("--dry-run")
    assert said.startswith("Would drop the raw streams of 2 model calls more than 30 days old (")
    assert not ModelCall.objects.exclude(raw_pruned_at=None).exists()

    said = prune()
    assert said.startswith("Dropped the raw streams of 2 model calls more than 30 days old (")
    assert said.endswith("KB compressed); their requests and transcripts are kept.")
    for call in ModelCall.objects.all():
        pruned = call.run_id == old.pk
        assert (call.raw_pruned_at is not None) == pruned
        assert call.raw_stream == ("" if pruned else before[call.pk][1])
        assert encode_body(call.request) == before[call.pk][0]
        assert call.request_sha256 == payload_sha256(before[call.pk][0])
    assert list(made.messages.values_list("content", flat=True)) == messages

    assert prune() == "Nothing to prune: no model call's raw stream is more than 30 days old."
    assert json.loads(prune("--days", "0", "--json"))["calls"] == 1  # today's, now
    assert ModelCall.objects.filter(raw_pruned_at=None).count() == 0


def test_without_the_setting_or_days_nothing_is_pruned(settings: Any) -> None:
    settings.AGENTLAB_KEEP_RAW_DAYS = None
    aged(make.user())
    assert prune().startswith("Nothing pruned: AGENTLAB_KEEP_RAW_DAYS is not set")
    assert not ModelCall.objects.exclude(raw_pruned_at=None).exists()
    assert prune("--days", "35").startswith("Dropped the raw streams of 2 model calls")


@pytest.mark.parametrize("days", ["-1", "ten", "1.5", ""])
def test_bad_days_are_refused_in_one_line(days: str) -> None:
    with pytest.raises(CommandError, match=r"^--days must be a whole number of days"):
        prune("--days", days)


def test_bad_days_exit_1_without_a_traceback() -> None:
    manage = Path(django_settings.BASE_DIR) / "manage.py"
    done = subprocess.run(
        [sys.executable, str(manage), "prune", "--days", "soon"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "CommandError: --days must be a whole number of days (0 or more), not 'soon'."
    )


def test_the_inspector_and_the_admin_say_when_the_stream_was_pruned(
    client_in: Client, user: Any, staff: Client
) -> None:
    made, old, new = aged(user)
    prune("--days", "30")
    when = ModelCall.objects.filter(run=old).first()
    assert when is not None and when.raw_pruned_at is not None
    line = f"The raw stream was pruned on {timezone.localtime(when.raw_pruned_at):%-d %B %Y}."
    assert when.pruned_note == line

    page = client_in.get(reverse("chat:run_inspect", args=[made.pk, old.pk])).content.decode()
    assert line in page and "Raw stream:" not in page
    fresh = client_in.get(reverse("chat:run_inspect", args=[made.pk, new.pk])).content.decode()
    assert "Raw stream: " in fresh and "pruned" not in fresh

    admin = staff.get(reverse("admin:chat_modelcall_change", args=[when.pk])).content.decode()
    assert line in admin
