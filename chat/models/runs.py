"""Runs and what they did: every tool call and every provider request."""

from __future__ import annotations

import zlib
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.formats import date_format
from django.utils.timezone import localtime

from . import request_store


class RunStatus(models.TextChoices):
    IN_PROGRESS = "in_progress", "In progress"
    REQUIRES_ACTION = "requires_action", "Waiting for approval"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    INTERRUPTED = "interrupted", "Interrupted"


class ToolCallStatus(models.TextChoices):
    IN_PROGRESS = "in_progress", "In progress"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class Measured(models.Model):
    """What a run and each of its model calls used, and how long it took."""

    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    time_to_first_token = models.FloatField(null=True, blank=True, help_text="Seconds.")
    duration = models.FloatField(null=True, blank=True, help_text="Seconds.")
    error = models.TextField(blank=True)

    class Meta:
        abstract = True

    def usage_text(self) -> str:
        return (
            f"{self.prompt_tokens:,} prompt + {self.completion_tokens:,} completion = "
            f"{self.total_tokens:,} tokens"
        )


ACTIVE = (RunStatus.IN_PROGRESS, RunStatus.REQUIRES_ACTION)
"""A run not over yet: executing, or waiting for a person (one per conversation)."""


class RunQuerySet(models.QuerySet["Run"]):
    def in_progress(self) -> RunQuerySet:
        return self.filter(status=RunStatus.IN_PROGRESS)

    def waiting(self) -> RunQuerySet:
        """Runs that wait for a person to decide tool calls: no process holds them."""
        return self.filter(status=RunStatus.REQUIRES_ACTION)

    def active(self) -> RunQuerySet:
        return self.filter(status__in=ACTIVE)


class Run(Measured):
    """One agent loop, started by one user message."""

    conversation = models.ForeignKey(
        "chat.Conversation", on_delete=models.CASCADE, related_name="runs"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(
        max_length=20, choices=RunStatus.choices, default=RunStatus.IN_PROGRESS, db_index=True
    )
    model = models.CharField(max_length=200, blank=True)
    parameters = models.JSONField(default=dict, blank=True)
    steps = models.PositiveIntegerField(default=0, help_text="Model turns used (event loops).")
    worker = models.CharField(
        max_length=200, blank=True, help_text="The process executing the run (host:pid:boot)."
    )
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="Last sign of life from the executing process."
    )
    lease_expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Until when the worker holds the run; past it any live process may claim it.",
    )
    resumes = models.PositiveIntegerField(
        default=0, help_text="Times another process (or a restart) took the run over."
    )
    waiting_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Of a run waiting for approval, when its undecided calls expire as denied.",
    )
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["started_at", "id"]
        # The Usage page reads a period's runs by when they started.
        indexes = [models.Index(fields=["started_at"], name="chat_run_started_at")]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation"],
                condition=Q(status__in=["in_progress", "requires_action"]),
                name="one_active_run_per_conversation",
            )
        ]

    def __str__(self) -> str:
        return f"Run {self.pk} ({self.status})"

    @property
    def is_active(self) -> bool:
        """Executing now (a waiting run is not: nothing streams)."""
        return self.status == RunStatus.IN_PROGRESS

    @property
    def is_waiting(self) -> bool:
        return self.status == RunStatus.REQUIRES_ACTION

    @property
    def model_label(self) -> str:
        from chat.agent.scripted import SCRIPTED_LABEL, SCRIPTED_MODEL

        return SCRIPTED_LABEL if self.model == SCRIPTED_MODEL else self.model


class LeaseEnd(models.TextChoices):
    FINISHED = "finished", "Run finished"
    RELEASED = "released", "Released (the process stopped)"
    EXPIRED = "expired", "Expired (the process died or stalled; another took the run over)"
    WAITING = "waiting", "Let go (the run waits for approval)"


class RunLease(models.Model):
    """One process's hold on a run, from taking it (start, or a claim) to letting it go."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="leases")
    worker = models.CharField(max_length=200, help_text="host:pid:boot of the process.")
    acquired_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=LeaseEnd.choices, blank=True)

    class Meta:
        ordering = ["run", "acquired_at", "id"]

    def __str__(self) -> str:
        return f"Lease of run {self.run_id} by {self.worker}"


class ToolFailure(models.TextChoices):
    """Why a call failed (chat.agent.tools.FAILURE_KINDS), as pills name it."""

    TOOL_ERROR = "tool_error", "failed"
    INVALID_ARGUMENTS = "invalid_arguments", "invalid arguments"
    UNKNOWN_TOOL = "unknown_tool", "unknown tool"
    NOT_ENABLED = "not_enabled", "not enabled"
    TIMEOUT = "timeout", "timed out"
    UNAVAILABLE = "unavailable", "server unavailable"
    INTERRUPTED = "interrupted", "interrupted"
    DENIED = "denied", "denied"
    NOT_ALLOWED = "not_allowed", "not allowed"


class Approval(models.TextChoices):
    """A person's decision on a call whose tool asks first (empty: it did not ask)."""

    WAITING = "waiting", "Waiting for approval"
    APPROVED = "approved", "Approved"
    ALWAYS = "always", "Approved, always allowed in this conversation"
    EDITED = "edited", "Edited and approved"
    DENIED = "denied", "Denied"
    EXPIRED = "expired", "Expired without a decision (denied)"
    STOPPED = "stopped", "Stopped before a decision"


class Policy(models.TextChoices):
    RUN = "run", "Run without asking"
    ASK = "ask", "Ask first"
    NEVER = "never", "Never run"


class ToolCallQuerySet(models.QuerySet["ToolCall"]):
    def in_progress(self) -> ToolCallQuerySet:
        return self.filter(status=ToolCallStatus.IN_PROGRESS)

    def waiting(self) -> ToolCallQuerySet:
        return self.filter(approval=Approval.WAITING)


class ToolCall(models.Model):
    """The execution log of one tool call: pills and the "Looking up" indicator read this."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tool_calls")
    message = models.ForeignKey(
        "chat.Message",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="tool_call_logs",
        help_text="The assistant message that asked for the call.",
    )
    step = models.PositiveIntegerField(default=0)
    position = models.PositiveIntegerField(default=0, help_text="Order within its message.")
    call_id = models.CharField(max_length=200)
    name = models.CharField(max_length=200, db_index=True)
    arguments = models.TextField(blank=True, help_text="Raw JSON string as the model sent it.")
    status = models.CharField(
        max_length=20,
        choices=ToolCallStatus.choices,
        default=ToolCallStatus.IN_PROGRESS,
        db_index=True,
    )
    result = models.TextField(blank=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration = models.FloatField(null=True, blank=True, help_text="Seconds.")
    server = models.CharField(
        max_length=40, blank=True, help_text="The MCP server the tool lives on; empty: built in."
    )
    raw_result = models.JSONField(
        null=True, blank=True, help_text="The result as the server sent it (MCP tools)."
    )
    failure = models.CharField(
        max_length=20,
        choices=ToolFailure.choices,
        blank=True,
        help_text="Of a failed call, why.",
    )
    policy = models.CharField(
        max_length=10,
        choices=Policy.choices,
        blank=True,
        help_text="The tool's policy when the model called it (empty: an evaluation's replay).",
    )
    approval = models.CharField(max_length=10, choices=Approval.choices, blank=True, db_index=True)
    asked_at = models.DateTimeField(null=True, blank=True, help_text="When the wait began.")
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_by_name = models.CharField(
        max_length=200,
        blank=True,
        help_text="Of an imported decision whose decider has no account here, their username.",
    )
    edited_arguments = models.TextField(
        blank=True, help_text="The arguments a person approved in place of the model's."
    )
    decision_reason = models.TextField(blank=True)

    objects = ToolCallQuerySet.as_manager()

    class Meta:
        ordering = ["run", "step", "position", "id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status == ToolCallStatus.IN_PROGRESS

    @property
    def display_name(self) -> str:
        from chat.agent.tools import humanize

        return humanize(self.name)

    @property
    def is_waiting(self) -> bool:
        return self.approval == Approval.WAITING

    @property
    def decider(self) -> str:
        """Who decided the call, by username; empty when nobody did (it expired)."""
        return self.decided_by.get_username() if self.decided_by else self.decided_by_name

    @property
    def run_arguments(self) -> str:
        """The arguments the call ran with: a person's edit, else the model's."""
        return self.edited_arguments or self.arguments


def packed(raw_stream: str) -> bytes:
    """A raw stream as stored: zlib-compressed (its lines repeat the same JSON keys)."""
    return zlib.compress(raw_stream.encode()) if raw_stream else b""


class ModelCallQuerySet(models.QuerySet["ModelCall"]):
    def _fetch_all(self) -> None:
        # Calls fetched together rebuild their requests in one pass when one is read (an
        # export's prefetch, a run's steps): reading each alone would read its chain each time.
        fresh = self._result_cache is None
        super()._fetch_all()
        if fresh and self._result_cache and isinstance(self._result_cache[0], ModelCall):
            request_store.share_batch(self._result_cache)

    def without_payloads(self) -> ModelCallQuerySet:
        """Without the stored request and raw stream: what pages that list calls need."""
        return self.defer("request_delta", "raw_stream_zlib")

    def prunable(self, before: datetime) -> ModelCallQuerySet:
        """Calls started before `before` whose raw stream is still kept."""
        return self.filter(started_at__lt=before, raw_pruned_at=None).exclude(raw_stream_zlib=b"")


class ModelCall(Measured):
    """One request to the provider: what was sent (stored as `request_store` says), what came
    back, and how long it took."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="model_calls")
    step = models.PositiveIntegerField()
    model = models.CharField(max_length=200, blank=True)
    url = models.CharField(max_length=500, blank=True, help_text="Without credentials.")
    request_base = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.RESTRICT,
        related_name="+",
        help_text="The conversation's earlier call whose request this one extends; none: whole.",
    )
    request_delta = models.TextField(
        default="{}", help_text="JSON text: the body sent, or what it adds to request_base's."
    )
    request_sha256 = models.CharField(
        max_length=64, blank=True, help_text="Of the exact bytes sent (hex)."
    )
    raw_stream_zlib = models.BinaryField(
        blank=True,
        default=b"",
        help_text="The stream as received, zlib-compressed: one 'milliseconds<TAB>line' a line.",
    )
    raw_pruned_at = models.DateTimeField(
        null=True, blank=True, help_text="When `manage.py prune` dropped the raw stream."
    )
    preflight = models.JSONField(
        default=list, blank=True, help_text="History violations repaired before this request."
    )
    http_status = models.PositiveIntegerField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=1)
    finish_reason = models.CharField(max_length=40, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)

    objects = ModelCallQuerySet.as_manager()

    class Meta:
        ordering = ["run", "step"]

    def __str__(self) -> str:
        return f"Model call {self.step} of run {self.run_id}"

    @property
    def request(self) -> Any:
        """The exact JSON body sent, rebuilt from the stored chain."""
        return request_store.body_of(self)

    @request.setter
    def request(self, body: Any) -> None:
        request_store.store_whole(self, body)

    @property
    def raw_stream(self) -> str:
        """The stream as received: one 'milliseconds<TAB>line' a line."""
        data = self.raw_stream_zlib
        return zlib.decompress(data).decode() if data else ""

    @raw_stream.setter
    def raw_stream(self, text: str) -> None:
        self.raw_stream_zlib = packed(text)

    @property
    def pruned_note(self) -> str:
        """What readers say in place of a stream `manage.py prune` dropped; empty if it did not."""
        if self.raw_pruned_at is None:
            return ""
        day = date_format(localtime(self.raw_pruned_at), "j F Y")
        return f"The raw stream was pruned on {day}."

    def raw_chunks(self) -> list[tuple[str, str]]:
        """(milliseconds, line) pairs of the stored stream."""
        return [
            (ms, line)
            for ms, _, line in (row.partition("\t") for row in self.raw_stream.splitlines())
        ]
