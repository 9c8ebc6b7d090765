"""What a conversation with an agent leaves behind: the transcript and every call it made."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.validators import URLValidator
from django.db import models
from django.db.models import Q

from chat.agent.contracts import AgentParameters

logger = logging.getLogger(__name__)
# Hosts without a dot too (docker-compose service names such as http://vllm:8000/v1).
_ANY_HOST_URL = r"^https?://[^\s/:@]+(:\d+)?(/\S*)?$"


class RunStatus(models.TextChoices):
    IN_PROGRESS = "in_progress", "In progress"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    INTERRUPTED = "interrupted", "Interrupted"


class ToolCallStatus(models.TextChoices):
    IN_PROGRESS = "in_progress", "In progress"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class ProviderProfile(models.Model):
    """An OpenAI-compatible endpoint and its quirks. Keys stay in the environment, never here."""

    class ToolCallContent(models.TextChoices):
        EMPTY = "empty", 'Empty string ""'
        NULL = "null", "null"
        OMIT = "omit", "Omitted"

    class ToolCallIds(models.TextChoices):
        ANY = "any", "Any string"
        ALNUM9 = "alnum9", "9 letters or digits (Mistral)"

    class ReasoningField(models.TextChoices):
        DROP = "", "Not sent back"
        REASONING_CONTENT = "reasoning_content", "reasoning_content (DeepSeek)"
        REASONING = "reasoning", "reasoning"

    name = models.CharField(max_length=100, unique=True)
    base_url = models.CharField(
        max_length=500,
        validators=[URLValidator(schemes=["http", "https"], regex=_ANY_HOST_URL)],
        help_text="e.g. https://api.openai.com/v1 or http://vllm:8000/v1",
    )
    api_key_env = models.CharField(
        max_length=100,
        blank=True,
        default="OPENAI_API_KEY",
        help_text="Name of the environment variable that holds the key (empty: no key).",
    )
    model = models.CharField(max_length=200)
    tool_call_content = models.CharField(
        max_length=10, choices=ToolCallContent.choices, default=ToolCallContent.EMPTY
    )
    tool_call_ids = models.CharField(
        max_length=10, choices=ToolCallIds.choices, default=ToolCallIds.ANY
    )
    reasoning_field = models.CharField(
        max_length=20, choices=ReasoningField.choices, default=ReasoningField.DROP, blank=True
    )
    parallel_tool_calls = models.BooleanField(
        default=True, help_text="Send parallel_tool_calls with the tools."
    )
    notes = models.TextField(blank=True, help_text="What check_provider found, for example.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ConversationQuerySet(models.QuerySet["Conversation"]):
    def for_user(self, user: Any) -> ConversationQuerySet:
        """The security boundary: a user reaches only their own conversations."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(owner=user)


class Conversation(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, blank=True)
    profile = models.ForeignKey(
        ProviderProfile,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="conversations",
        help_text="Empty: the endpoint configured in the environment.",
    )
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    forked_at = models.PositiveIntegerField(
        null=True, blank=True, help_text="Index of the parent's message the fork starts after."
    )
    parameters = models.JSONField(
        default=dict, blank=True, help_text="Validated AgentParameters snapshot."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    objects = ConversationQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at", "-id"]

    def __str__(self) -> str:
        return self.title or f"Conversation {self.pk}"

    @property
    def group_name(self) -> str:
        """The channel layer group every socket watching this conversation joins."""
        return f"conversation.{self.pk}"

    def agent_parameters(self) -> AgentParameters:
        """The stored snapshot; tools no longer registered in this process are left out."""
        from chat.agent.tools import default_registry

        data = dict(self.parameters or {})
        tools = list(data.get("enabled_tools") or ())
        known = [name for name in tools if name in default_registry]
        if known != tools:
            logger.warning(
                "conversation %s: tool(s) %s are not registered here and stay disabled",
                self.pk,
                ", ".join(sorted(set(tools) - set(known))),
            )
            data["enabled_tools"] = known
        return AgentParameters.model_validate(data)

    def set_agent_parameters(self, parameters: AgentParameters) -> None:
        self.parameters = parameters.to_json()


class Run(models.Model):
    """One agent loop, started by one user message."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="runs")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(
        max_length=20, choices=RunStatus.choices, default=RunStatus.IN_PROGRESS, db_index=True
    )
    model = models.CharField(max_length=200, blank=True)
    parameters = models.JSONField(default=dict, blank=True)
    steps = models.PositiveIntegerField(default=0, help_text="Model turns used (event loops).")
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    time_to_first_token = models.FloatField(null=True, blank=True, help_text="Seconds.")
    duration = models.FloatField(null=True, blank=True, help_text="Seconds.")
    error = models.TextField(blank=True)
    worker = models.CharField(
        max_length=200, blank=True, help_text="The process executing the run (host:pid:boot)."
    )
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="Last sign of life from the executing process."
    )
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["started_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation"],
                condition=Q(status="in_progress"),
                name="one_run_in_progress_per_conversation",
            )
        ]

    def __str__(self) -> str:
        return f"Run {self.pk} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status == RunStatus.IN_PROGRESS

    @property
    def model_label(self) -> str:
        from chat.agent.scripted import SCRIPTED_LABEL, SCRIPTED_MODEL

        return SCRIPTED_LABEL if self.model == SCRIPTED_MODEL else self.model


class Message(models.Model):
    """One provider-facing message, in order; the transcript sent back on the next run."""

    class Role(models.TextChoices):
        SYSTEM = "system", "System"
        USER = "user", "User"
        ASSISTANT = "assistant", "Assistant"
        TOOL = "tool", "Tool"

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="messages"
    )
    index = models.PositiveIntegerField()
    role = models.CharField(max_length=10, choices=Role.choices)
    # NULL and "" differ on the wire: a tool-call-only assistant message has no content.
    content = models.TextField(null=True, blank=True)  # noqa: DJ001
    reasoning = models.TextField(blank=True)
    tool_calls = models.JSONField(
        default=list, blank=True, help_text="OpenAI shape, on assistant messages."
    )
    tool_call_id = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "index"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "index"], name="unique_message_index")
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.index}"


class ToolCall(models.Model):
    """The execution log of one tool call: pills and the "Looking up" indicator read this."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tool_calls")
    message = models.ForeignKey(
        Message,
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

    class Meta:
        ordering = ["run", "step", "position", "id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"

    @property
    def display_name(self) -> str:
        from chat.agent.tools import humanize

        return humanize(self.name)


class ModelCall(models.Model):
    """One request to the provider: what was sent, what came back, and how long it took."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="model_calls")
    step = models.PositiveIntegerField()
    model = models.CharField(max_length=200, blank=True)
    url = models.CharField(max_length=500, blank=True, help_text="Without credentials.")
    request = models.JSONField(default=dict, help_text="The exact JSON body sent.")
    raw_stream = models.TextField(
        blank=True, help_text="The stream as received: one 'milliseconds<TAB>line' a line."
    )
    preflight = models.JSONField(
        default=list, blank=True, help_text="History violations repaired before this request."
    )
    http_status = models.PositiveIntegerField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=1)
    finish_reason = models.CharField(max_length=40, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    time_to_first_token = models.FloatField(null=True, blank=True, help_text="Seconds.")
    duration = models.FloatField(null=True, blank=True, help_text="Seconds.")
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step"]

    def __str__(self) -> str:
        return f"Model call {self.step} of run {self.run_id}"

    def raw_chunks(self) -> list[tuple[str, str]]:
        """(milliseconds, line) pairs of the stored stream."""
        return [
            (ms, line)
            for ms, _, line in (row.partition("\t") for row in self.raw_stream.splitlines())
        ]


class HistoryRepair(models.Model):
    """What a repair changed in a stored transcript, and why (cancel, crash, validate --fix)."""

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="history_repairs"
    )
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="history_repairs"
    )
    reason = models.CharField(max_length=200)
    added = models.JSONField(default=list, help_text="Messages added (OpenAI shape, index).")
    removed = models.JSONField(default=list, help_text="Messages removed (OpenAI shape, index).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Repair of conversation {self.conversation_id}: {self.reason}"
