"""Cases (kept moments of conversations with the tool decision expected there) and evaluations
(replays of a case set on a model, with a verdict per case and attempt)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from chat.agent import decisions
from chat.agent.tools import humanize

from .conversations import Conversation
from .runs import Run, RunStatus


def validate_expectation(value: Any) -> None:
    try:
        decisions.check_expectation(value)
    except ValueError as exc:
        raise ValidationError(str(exc), code="expectation") from None


class CaseSet(models.Model):
    """A named set of cases, replayed together."""

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class CaseSource(models.TextChoices):
    REPLY = "reply", "The stored reply"
    ANNOTATION = "annotation", "An annotation"
    GIVEN = "given", "Given by hand"
    IMPORTED = "imported", "Imported"


class Case(models.Model):
    """A moment of a conversation: the history up to a user or tool message, the tools offered
    then, the tool decision expected next, and the tool results recorded in the conversation
    (fixtures: a replay answers from them and never runs a tool)."""

    case_set = models.ForeignKey(CaseSet, on_delete=models.CASCADE, related_name="cases")
    title = models.CharField(max_length=200)
    conversation = models.ForeignKey(
        Conversation,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="cases",
        help_text="Where the case was taken from (it keeps its own copy of the history).",
    )
    at_message = models.PositiveIntegerField(
        null=True, blank=True, help_text="The index of the last message of the history."
    )
    messages = models.JSONField(help_text="The history in the OpenAI shape, system prompts first.")
    preamble = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="How many of the first messages are the system prompts and pre-messages (an "
        "agent version's replace them); empty: the leading system messages.",
    )
    tools = models.JSONField(default=list, blank=True, help_text="The OpenAI `tools` offered.")
    parameters = models.JSONField(
        default=dict, blank=True, help_text="temperature, top_p, max_tokens, max_event_loops."
    )
    expected = models.JSONField(
        validators=[validate_expectation],
        help_text='{"no_tool": true} or {"tool_calls": [{"name": ..., "arguments": {...}}]}.',
    )
    source = models.CharField(max_length=20, choices=CaseSource.choices, default=CaseSource.REPLY)
    fixtures = models.JSONField(
        default=list, blank=True, help_text='Recorded results: [{"name", "arguments", "content"}].'
    )
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["case_set", "id"]

    def __str__(self) -> str:
        return self.title

    @property
    def expected_text(self) -> str:
        return decisions.summary(self.expected)

    @property
    def tool_names(self) -> list[str]:
        return [
            definition.name
            for entry in self.tools
            if isinstance(entry, dict) and (definition := decisions.tool_definition(entry))
        ]


EvalStatus = RunStatus
"""An evaluation begins and ends as a run does (stopped: cancelled; its process gone:
interrupted)."""


class Comparison(models.Model):
    """Two or three evaluations of the same cases on different models, side by side."""

    title = models.CharField(max_length=200)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.title


class EvalRunQuerySet(models.QuerySet["EvalRun"]):
    def in_progress(self) -> EvalRunQuerySet:
        return self.filter(status=EvalStatus.IN_PROGRESS)


class EvalRun(models.Model):
    """One replay of a case set (or of a comparison's cases) on one model."""

    case_set = models.ForeignKey(
        CaseSet, null=True, blank=True, on_delete=models.SET_NULL, related_name="eval_runs"
    )
    set_name = models.CharField(max_length=100, help_text="The set's name when it ran.")
    comparison = models.ForeignKey(
        Comparison, null=True, blank=True, on_delete=models.CASCADE, related_name="eval_runs"
    )
    label = models.CharField(max_length=200, help_text="The model (and profile) replayed on.")
    model = models.CharField(max_length=200, blank=True)
    base_url = models.CharField(max_length=500, blank=True, help_text="Without credentials.")
    profile = models.ForeignKey(
        "chat.ProviderProfile", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    agent_version = models.ForeignKey(
        "chat.AgentVersion",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="eval_runs",
        help_text="Replayed with this version's prompts, pre-messages, tools and parameters "
        "instead of the cases' own.",
    )
    publishes = models.BooleanField(
        default=False,
        help_text="Its agent version is published when it ends completed and passes the "
        "agent's gate.",
    )
    baseline = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The published version's evaluation on the same cases, shown beside it.",
    )
    outcome = models.TextField(
        blank=True, help_text="What became of its agent version: published, or why not."
    )
    repeat = models.PositiveIntegerField(default=1)
    continue_loop = models.BooleanField(
        default=False, help_text="The loop went on to the final answer, tools answered by fixtures."
    )
    status = models.CharField(
        max_length=20, choices=EvalStatus.choices, default=EvalStatus.IN_PROGRESS, db_index=True
    )
    total = models.PositiveIntegerField(default=0, help_text="Attempts to make.")
    passed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    worker = models.CharField(
        max_length=200, blank=True, help_text="The process replaying it (host:pid:boot)."
    )
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    resumes = models.PositiveIntegerField(default=0)
    case_ids = models.JSONField(
        default=list, blank=True, help_text="The cases it replays: a resumed one makes the rest."
    )
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = EvalRunQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"{self.set_name} on {self.label}"

    @property
    def done(self) -> int:
        return self.passed + self.failed

    @property
    def is_active(self) -> bool:
        return self.status == EvalStatus.IN_PROGRESS

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.done if self.done else None


class ResultVerdict(models.TextChoices):
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"
    ERROR = "error", "Error"


class EvalResult(models.Model):
    """One attempt at one case: what was expected, what the model decided, and the verdict.

    Its `run` is an ordinary run in a conversation of its own (purpose "eval"), so every
    request it made is a ModelCall the inspector shows."""

    eval_run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="results")
    case = models.ForeignKey(
        Case, null=True, blank=True, on_delete=models.SET_NULL, related_name="results"
    )
    case_title = models.CharField(max_length=200)
    attempt = models.PositiveIntegerField(default=1)
    verdict = models.CharField(max_length=10, choices=ResultVerdict.choices)
    reason = models.TextField(blank=True)
    expected = models.JSONField()
    got = models.JSONField(null=True, blank=True)
    answer = models.TextField(blank=True, help_text="The final answer (with --continue).")
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="eval_results"
    )
    latency = models.FloatField(null=True, blank=True, help_text="Seconds.")
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    gated_calls = models.JSONField(
        default=list,
        blank=True,
        help_text="The model's first-turn calls that would have waited for approval (policy ask) "
        'or been refused (never) outside the replay: [{"name": ..., "policy": ...}].',
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["eval_run", "id"]

    def __str__(self) -> str:
        return f"{self.case_title} #{self.attempt}: {self.verdict}"

    @property
    def passed(self) -> bool:
        return self.verdict == ResultVerdict.PASSED

    @property
    def expected_text(self) -> str:
        return decisions.summary(self.expected)

    @property
    def got_text(self) -> str:
        return "—" if self.got is None else decisions.summary(self.got)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def gated_text(self) -> str:
        """What approvals would have done to its calls ("would have waited for approval:
        Handoff note"); empty when no call would have waited or been refused."""
        parts = []
        for policy, said in GATED.items():
            names = [c["name"] for c in self.gated_calls or () if c.get("policy") == policy]
            if names:
                parts.append(f"{said}: {', '.join(dict.fromkeys(map(humanize, names)))}")
        return "; ".join(parts)


GATED = {"ask": "would have waited for approval", "never": "would have been refused"}
"""What a policy would have done to a replayed call, as an evaluation says it."""
