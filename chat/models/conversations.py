"""Conversations and their transcript: messages, and the repairs made to them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models
from django.db.models import Count, Exists, OuterRef, Prefetch, Q, Subquery, Sum
from django.db.models.functions import Coalesce

from chat.agent.contracts import AgentParameters
from chat.agent.titles import TITLE_CHARS

from .providers import ProviderProfile
from .runs import ModelCall, Run, ToolCall

if TYPE_CHECKING:
    from .agents import AgentVersion


def group_name(conversation_id: int) -> str:
    """The channel layer group every socket watching a conversation joins."""
    return f"conversation.{conversation_id}"


def title_from(text: str) -> str:
    """A conversation title from its first message: one line, at most TITLE_CHARS characters."""
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


class Purpose(models.TextChoices):
    CHAT = "chat", "Chat"
    EVAL = "eval", "Evaluation replay"


class ConversationQuerySet(models.QuerySet["Conversation"]):
    def chats(self) -> ConversationQuerySet:
        """Conversations people had: not the replays an evaluation made (those are reached from
        their evaluation's results)."""
        return self.filter(purpose=Purpose.CHAT)

    def begun(self) -> ConversationQuerySet:
        """Those that have begun: what the owner's list and search show. A conversation made by
        "New conversation" comes into them with its first message, which gives it its title in
        the same transaction; one without a title (older data, an import without a user
        message) counts once it has a message. The title is a column of the row the list reads
        anyway; the EXISTS, on the messages' conversation index, runs for untitled rows only."""
        has_message = Exists(Message.objects.filter(conversation=OuterRef("pk")))
        return self.filter(Q(title__gt="") | Q(has_message))

    # Who may do what is `chat.access`'s rule (imported here late: it imports the models).

    def for_user(self, user: Any) -> ConversationQuerySet:
        """A user's own conversations: those they may write in (`chat.access`)."""
        from chat import access

        return access.conversations(user, access.Action.WRITE, self)

    def readable_by(self, user: Any) -> ConversationQuerySet:
        """The conversations `user` may read: their own, and those shared with the team."""
        from chat import access

        return access.conversations(user, access.Action.READ, self)

    def shared_with(self, user: Any) -> ConversationQuerySet:
        """What the team shares with `user`: shared conversations of other users."""
        from chat import access

        return access.shared_with(user, self)

    def with_active_run(self) -> ConversationQuerySet:
        """Annotated with `has_active_run`: whether a run is in progress or waiting."""
        active = Run.objects.active().filter(conversation=OuterRef("pk"))
        return self.annotate(has_active_run=Exists(active))

    def with_stats(self) -> ConversationQuerySet:
        """Annotated with `run_count`, `tool_call_count` and `total_tokens`.

        Correlated subqueries rather than joins: a join over runs and tool calls would
        multiply rows.
        """
        runs = Run.objects.filter(conversation=OuterRef("pk"))
        calls = ToolCall.objects.filter(run__conversation=OuterRef("pk"))
        return self.annotate(
            run_count=_count(runs, "conversation"),
            tool_call_count=_count(calls, "run__conversation"),
            total_tokens=_sum(runs, "conversation", "total_tokens"),
        )

    def for_export(self, *, full: bool, all_versions: bool = False) -> ConversationQuerySet:
        """With what export records need, fetched in a fixed number of queries: the active path,
        or with `full` every message and version.

        With `all_versions` (openai format) messages are not prefetched: `versions.paths` reads
        each conversation's own, and a prefetch would narrow its query to the active path.
        """
        conversations = self.select_related("owner").with_active_run().order_by("pk")
        if all_versions and not full:
            return conversations
        messages = Message.objects.order_by("index", "pk") if full else Message.objects.active()
        conversations = conversations.prefetch_related(Prefetch("messages", queryset=messages))
        if not full:
            return conversations
        runs = Run.objects.select_related("created_by").prefetch_related(
            Prefetch(
                "tool_calls",
                queryset=ToolCall.objects.select_related("decided_by").order_by(
                    "step", "position", "id"
                ),
            ),
            Prefetch("model_calls", queryset=ModelCall.objects.order_by("step", "id")),
        )
        return conversations.prefetch_related(
            Prefetch("versions", queryset=Version.objects.order_by("index", "number", "pk")),
            Prefetch("runs", queryset=runs.order_by("started_at", "id")),
            Prefetch(
                "history_repairs", queryset=HistoryRepair.objects.order_by("created_at", "id")
            ),
        )


def _count(queryset: models.QuerySet[Any], group: str) -> Coalesce:
    counted = queryset.order_by().values(group).annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted), 0)


def _sum(queryset: models.QuerySet[Any], group: str, column: str) -> Coalesce:
    summed = queryset.order_by().values(group).annotate(total=Sum(column)).values("total")
    return Coalesce(Subquery(summed), 0)


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
    shared = models.BooleanField(
        default=False,
        help_text="Shared with the team: every logged-in user may read it; only its owner writes.",
    )
    purpose = models.CharField(
        max_length=10, choices=Purpose.choices, default=Purpose.CHAT, db_index=True
    )
    agent_version = models.ForeignKey(
        "AgentVersion",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="conversations",
        help_text="The agent version it started from. Empty: the built-in Default.",
    )
    always_allowed = models.JSONField(
        default=list,
        blank=True,
        help_text="Tools its owner chose to always allow here: they run without asking "
        "(unless their policy is never).",
    )
    pinned_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Pinned by its owner: on top of their list, latest pin first.",
    )
    archived_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Archived by its owner: out of their list and the default search.",
    )
    seen_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When its owner last opened it: a run that ends later is news to them.",
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
        return group_name(self.pk)

    def agent_parameters(self) -> AgentParameters:
        """The stored snapshot as the user saved it: a chosen tool that this process does not
        have stays chosen (and is not offered to the model), so nothing here ever changes a
        conversation's settings behind its user's back."""
        return AgentParameters.from_stored(self.parameters or {})

    def set_agent_parameters(self, parameters: AgentParameters) -> None:
        self.parameters = parameters.to_json()

    def changed_from(self) -> AgentVersion | None:
        """The agent version it started from, when its settings (endpoint, parameters) are no
        longer that version's; None when they are, or when it started from the built-in
        Default. Derived each time: nothing stored can say so wrongly."""
        version = self.agent_version
        return None if version is None or version.matches(self) else version

    def is_read_only_for(self, user: Any) -> bool:
        """Whether `user` may not write here (`chat.access`): to a reader, read-only."""
        from chat import access

        return not access.may(user, access.Action.WRITE, self)

    def has_unfinished_run(self) -> bool:
        """Whether a run is in progress or waits for approval."""
        return self.runs.active().exists()


class Version(models.Model):
    """A version of a conversation's path that is not the active one: its messages from
    `index` on (the active path's messages before `index` come first).

    The active path is every message without a version. Versions that hang off the active path
    have no parent; one that hangs off another version's messages names it. Switching to a
    version archives the active suffix from the same index as a version of its own, so every
    path is always a plain list of messages (see `chat.transcripts.versions`).
    """

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="versions"
    )
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    index = models.PositiveIntegerField(help_text="Index of the version's first message.")
    number = models.PositiveIntegerField(help_text="Its place among the versions at that index.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "index", "number"]

    def __str__(self) -> str:
        return f"version {self.number} from message {self.index}"


class MessageQuerySet(models.QuerySet["Message"]):
    def active(self) -> MessageQuerySet:
        """The active path, in order: what the model sees and the page shows."""
        return self.filter(version__isnull=True).order_by("index")


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
    attachments = models.JSONField(
        default=list,
        blank=True,
        help_text="Files sent with a user message: name, content type, size, sha256, kind "
        "(image, text, pdf), pages. The bytes are in storage under attachments/ by sha256.",
    )
    version = models.ForeignKey(
        Version,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="messages",
        help_text="Empty: on the active path.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MessageQuerySet.as_manager()

    class Meta:
        ordering = ["conversation", "index"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "index"],
                condition=models.Q(version__isnull=True),
                name="unique_message_index",
            ),
            models.UniqueConstraint(
                fields=["version", "index"],
                condition=models.Q(version__isnull=False),
                name="unique_version_message_index",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.index}"


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
