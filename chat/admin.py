"""What agents did, in the admin: transcripts with their tool calls, runs, model calls.

Everything here is a record, so it is read-only: the only change the admin makes is deleting a
conversation, which takes its runs, messages and logs with it. Pages run a fixed number of
queries however long the conversation is. Provider profiles are settings, not records: staff
edit them here (keys stay in the environment; the admin tells only whether one is set).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import (
    CharField,
    Count,
    Exists,
    F,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, NullIf
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.text import smart_split, unescape_string_literal

from chat import agent
from chat.forms import DEFAULT_PROVIDER_LABEL, ProviderProfileForm, key_is_set
from chat.models import (
    Conversation,
    HistoryRepair,
    Message,
    ModelCall,
    ProviderProfile,
    Run,
    RunStatus,
    ToolCall,
)
from chat.templatetags.chat_admin import folded, pretty, pretty_json, tool_pill

REDACTED = "[REDACTED]"
_SECRET_NAME = re.compile(
    r"^(proxy-)?authorization$|^x?-?api[-_]?key$|^api[-_]?token$|^access[-_]?token$|secret|password",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=-]+|\bsk-[A-Za-z0-9_-]{16,}")


def redact(value: Any, keys: Sequence[str] = ()) -> Any:
    """A JSON value with anything that looks like a credential replaced, for display.

    The client never puts the API key in a request body; this is the belt to that brace.
    `keys`: more key values to remove besides OPENAI_API_KEY (see profile_keys()).
    """
    known = sorted(
        {key for key in (settings.OPENAI_API_KEY, *keys) if len(key or "") >= 8},
        key=len,
        reverse=True,
    )
    return _redact(value, known)


def _redact(value: Any, keys: Sequence[str]) -> Any:
    if isinstance(value, dict):
        return {
            name: REDACTED if _SECRET_NAME.search(str(name)) and item else _redact(item, keys)
            for name, item in value.items()
        }
    if isinstance(value, list):
        return [_redact(item, keys) for item in value]
    if isinstance(value, str):
        for key in keys:
            value = value.replace(key, REDACTED)
        return _SECRET_VALUE.sub(REDACTED, value)
    return value


def profile_keys() -> list[str]:
    """The values of the key variables provider profiles name, set in this process."""
    names = ProviderProfile.objects.exclude(api_key_env="").values_list("api_key_env", flat=True)
    return [os.environ[name] for name in set(names) if os.environ.get(name)]


def pill(call: ToolCall, *, link: bool = True) -> SafeString:
    url = reverse("admin:chat_toolcall_change", args=[call.pk]) if link else ""
    return tool_pill(call.name, call.status, call.error, url)


def admin_link(obj: Any, text: Any = None) -> SafeString | str:
    if obj is None:
        return "—"
    opts = obj._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, obj if text is None else text)


class LabAdmin(admin.ModelAdmin):
    """Shared look: the transcript stylesheet."""

    class Media:
        css = {"all": ["chat/admin.css"]}


class RecordAdmin(LabAdmin):
    """Transcript rows are a record: viewed here, never added or changed.

    They are deleted only with their conversation: the delete check the admin runs on every
    row a conversation (or its owner) takes with it asks `has_delete_permission(request, row)`,
    so that answers like the conversation's own permission, while this admin's own delete page
    and bulk action stay closed.
    """

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is not None and request.user.has_perm("chat.delete_conversation")

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        raise PermissionDenied

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> HttpResponse:
        context["show_delete"] = False
        return super().render_change_form(request, context, *args, **kwargs)


def _count(queryset: QuerySet[Any], group: str) -> Coalesce:
    """COUNT of a correlated queryset as a subquery: no join, so no multiplied rows."""
    counted = queryset.order_by().values(group).annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted), 0)


def _sum(queryset: QuerySet[Any], group: str, column: str) -> Coalesce:
    summed = queryset.order_by().values(group).annotate(total=Sum(column)).values("total")
    return Coalesce(Subquery(summed), 0)


def conversation_model() -> Coalesce:
    """The model a conversation talks to: its parameters' model, else its provider profile's,
    else its latest run's."""
    last_run = Run.objects.filter(conversation=OuterRef("pk")).order_by("-started_at", "-id")
    return Coalesce(
        NullIf(KT("parameters__model"), Value("")),
        NullIf(F("profile__model"), Value("")),
        Subquery(last_run.values("model")[:1]),
        Value(""),
        output_field=CharField(),
    )


class ModelFilter(admin.SimpleListFilter):
    title = "model"
    parameter_name = "model"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = (
            Conversation.objects.annotate(model_name=conversation_model())
            .exclude(model_name="")
            .order_by("model_name")
            .values_list("model_name", flat=True)
            .distinct()
        )
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(model_name=self.value()) if self.value() else queryset


class RunStatusFilter(admin.SimpleListFilter):
    title = "run status"
    parameter_name = "run_status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> Sequence[tuple[str, str]]:
        return RunStatus.choices

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if not self.value():
            return queryset
        runs = Run.objects.filter(conversation=OuterRef("pk"), status=self.value())
        return queryset.filter(Exists(runs))


class ProviderFilter(admin.SimpleListFilter):
    """Which provider profile a conversation uses; "default" is the environment's endpoint."""

    title = "provider"
    parameter_name = "provider"
    DEFAULT = "default"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        profiles = ProviderProfile.objects.order_by("name").values_list("pk", "name")
        return [(self.DEFAULT, DEFAULT_PROVIDER_LABEL), *((str(pk), name) for pk, name in profiles)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        if value == self.DEFAULT:
            return queryset.filter(profile__isnull=True)
        return queryset.filter(profile_id=value) if value.isdigit() else queryset.none()


@dataclass
class CallView:
    """One requested tool call on an assistant message, with its execution log if any."""

    call: agent.ToolCall
    log: ToolCall | None

    @property
    def pill(self) -> SafeString:
        if self.log is not None:
            return pill(self.log)
        return tool_pill(self.call.name)

    @property
    def arguments(self) -> str:
        return pretty(self.call.arguments)

    @property
    def arguments_valid(self) -> bool:
        """Whether the raw arguments parse; the model's text is shown either way."""
        text = self.call.arguments.strip()
        if not text:
            return True
        try:
            json.loads(text)
        except ValueError:
            return False
        return True


@dataclass
class RunView:
    run: Run
    unlinked: list[ToolCall] = field(default_factory=list)


@dataclass
class Entry:
    message: Message
    run: RunView | None = None
    calls: list[CallView] = field(default_factory=list)
    answers: CallView | None = None

    @property
    def empty_content(self) -> str:
        """`null` or `""` when there is no text: the two differ on the wire."""
        if self.message.content is None:
            return "null"
        return '""' if self.message.content == "" else ""

    @property
    def content(self) -> str:
        if self.message.role == Message.Role.TOOL:
            return pretty(self.message.content)
        return self.message.content or ""


@dataclass
class Transcript:
    entries: list[Entry]
    runs_without_messages: list[RunView]
    tool_calls: int


def transcript(conversation: Conversation) -> Transcript:
    """The conversation in order, runs and tool-call logs attached: four queries in all."""
    messages = list(conversation.messages.order_by("index"))
    runs = list(
        conversation.runs.select_related("created_by")
        .prefetch_related(Prefetch("model_calls", queryset=ModelCall.objects.order_by("step")))
        .order_by("started_at", "id")
    )
    logs = list(
        ToolCall.objects.filter(run__conversation=conversation).order_by("step", "position", "id")
    )
    by_message = {(log.message_id, log.call_id): log for log in logs}
    message_ids = {message.pk for message in messages}
    views = {run.pk: RunView(run) for run in runs}
    for log in logs:
        if log.message_id is None or log.message_id not in message_ids:
            views[log.run_id].unlinked.append(log)
    entries = []
    shown: set[int] = set()
    asked: dict[str, CallView] = {}
    for message in messages:
        entry = Entry(message)
        if message.run_id in views and message.run_id not in shown:
            shown.add(message.run_id)
            entry.run = views[message.run_id]
        for value in message.tool_calls or ():
            call = agent.ToolCall.from_openai(value)
            view = CallView(call, by_message.get((message.pk, call.id)))
            entry.calls.append(view)
            asked[call.id] = view
        if message.role == Message.Role.TOOL:
            entry.answers = asked.get(message.tool_call_id) or CallView(
                agent.ToolCall(id=message.tool_call_id, name="unknown tool"), None
            )
        entries.append(entry)
    unshown = [view for pk, view in views.items() if pk not in shown]
    return Transcript(entries, unshown, len(logs))


@admin.register(Conversation)
class ConversationAdmin(LabAdmin):
    list_display = (
        "__str__",
        "owner",
        "provider",
        "model_name",
        "run_count",
        "tool_call_count",
        "tokens",
        "updated_at",
    )
    list_filter = (
        ("owner", admin.RelatedOnlyFieldListFilter),
        ProviderFilter,
        ModelFilter,
        RunStatusFilter,
        "updated_at",
        "created_at",
    )
    search_fields = ("title",)
    search_help_text = "Title, message text or tool name."
    list_select_related = ("owner", "profile")
    fields = (
        "owner",
        "title",
        "forked_from",
        "fork_list",
        "provider",
        "model_name",
        "parameters_display",
        "run_count",
        "tool_call_count",
        "tokens",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields[2:]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        runs = Run.objects.filter(conversation=OuterRef("pk"))
        calls = ToolCall.objects.filter(run__conversation=OuterRef("pk"))
        return (
            super()
            .get_queryset(request)
            .select_related("owner", "profile")
            .annotate(
                model_name=conversation_model(),
                run_count=_count(runs, "conversation"),
                tool_call_count=_count(calls, "run__conversation"),
                total_tokens=_sum(runs, "conversation", "total_tokens"),
            )
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Conversation], search_term: str
    ) -> tuple[QuerySet[Conversation], bool]:
        """Every word in the title, a message's text or tool calls, or a tool call's name.

        Subqueries rather than joins: a join over messages and tool calls would multiply rows.
        """
        for bit in smart_split(search_term):
            if bit.startswith(('"', "'")) and bit[0] == bit[-1]:
                bit = unescape_string_literal(bit)
            messages = Message.objects.filter(conversation=OuterRef("pk")).filter(
                Q(content__icontains=bit) | Q(tool_calls__icontains=bit)
            )
            calls = ToolCall.objects.filter(run__conversation=OuterRef("pk"), name__icontains=bit)
            queryset = queryset.filter(Q(title__icontains=bit) | Exists(messages) | Exists(calls))
        return queryset, False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Conversation | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context["transcript"] = transcript(obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description="provider", ordering="profile__name")
    def provider(self, obj: Conversation) -> SafeString | str:
        if obj.profile is None:
            return DEFAULT_PROVIDER_LABEL
        return admin_link(obj.profile)

    @admin.display(description="model", ordering="model_name")
    def model_name(self, obj: Conversation) -> str:
        return getattr(obj, "model_name", "") or "—"

    @admin.display(description="runs", ordering="run_count")
    def run_count(self, obj: Conversation) -> int:
        return getattr(obj, "run_count", 0)

    @admin.display(description="tool calls", ordering="tool_call_count")
    def tool_call_count(self, obj: Conversation) -> int:
        return getattr(obj, "tool_call_count", 0)

    @admin.display(description="tokens", ordering="total_tokens")
    def tokens(self, obj: Conversation) -> int:
        return getattr(obj, "total_tokens", 0)

    @admin.display(description="parameters")
    def parameters_display(self, obj: Conversation) -> SafeString:
        return format_html('<pre class="chat-pre">{}</pre>', pretty_json(obj.parameters))

    @admin.display(description="forked from")
    def forked_from(self, obj: Conversation) -> SafeString | str:
        if obj.parent is None:
            return "—" if obj.forked_at is None else "a conversation since deleted"
        return format_html("{} (after message {})", admin_link(obj.parent), obj.forked_at)

    @admin.display(description="forks")
    def fork_list(self, obj: Conversation) -> SafeString | str:
        forks = obj.forks.order_by("pk")
        return format_html_join(", ", "{}", ((admin_link(fork),) for fork in forks)) or "—"


@admin.register(ProviderProfile)
class ProviderProfileAdmin(LabAdmin):
    """Editable: an endpoint and its quirks. The key stays in the environment variable it names;
    the admin shows whether that variable is set in this process, never its value."""

    form = ProviderProfileForm
    list_display = (
        "name",
        "base_url",
        "model",
        "tool_call_content",
        "tool_call_ids",
        "reasoning_field_display",
        "parallel_tool_calls",
        "api_key_env_display",
        "key_set",
        "conversation_count",
    )
    list_filter = ("tool_call_content", "tool_call_ids", "reasoning_field", "parallel_tool_calls")
    search_fields = ("name", "base_url", "model", "notes")
    fieldsets = (
        (None, {"fields": ("name", "base_url", "model", "api_key_env", "key_status")}),
        (
            "Quirks",
            {
                "fields": (
                    "tool_call_content",
                    "tool_call_ids",
                    "reasoning_field",
                    "parallel_tool_calls",
                ),
                "description": "What differs between providers; check_provider --save-profile "
                "NAME detects them.",
            },
        ),
        (None, {"fields": ("notes", "conversation_count", "created_at", "updated_at")}),
    )
    readonly_fields = ("key_status", "conversation_count", "created_at", "updated_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[ProviderProfile]:
        return super().get_queryset(request).annotate(n_conversations=Count("conversations"))

    @admin.display(description="reasoning sent back as", ordering="reasoning_field")
    def reasoning_field_display(self, obj: ProviderProfile) -> str:
        return obj.reasoning_field or "—"

    @admin.display(description="key variable", ordering="api_key_env")
    def api_key_env_display(self, obj: ProviderProfile) -> str:
        return obj.api_key_env or "— (no key)"

    @admin.display(description="key set here", boolean=True)
    def key_set(self, obj: ProviderProfile) -> bool | None:
        """Whether the named variable is set in this process: yes/no, never the value."""
        return key_is_set(obj.api_key_env) if obj.api_key_env else None

    @admin.display(description="key")
    def key_status(self, obj: ProviderProfile | None) -> str:
        if obj is None or obj.pk is None:
            return "—"
        if not obj.api_key_env:
            return "No variable named: requests are sent without a key."
        if key_is_set(obj.api_key_env):
            return f"{obj.api_key_env} is set in this server process."
        return (
            f"{obj.api_key_env} is NOT set in this server process: requests will be sent "
            "without a key."
        )

    @admin.display(description="conversations", ordering="n_conversations")
    def conversation_count(self, obj: ProviderProfile) -> SafeString | int:
        count = getattr(obj, "n_conversations", None)
        if count is None:
            count = obj.conversations.count()
        if not count:
            return 0
        url = reverse("admin:chat_conversation_changelist")
        query = urlencode({ProviderFilter.parameter_name: obj.pk})
        return format_html('<a href="{}?{}">{}</a>', url, query, count)


class ModelCallInline(admin.TabularInline):
    model = ModelCall
    extra = 0
    can_delete = False
    show_change_link = True
    fields = (
        "step",
        "model",
        "http_status",
        "finish_reason",
        "prompt_tokens",
        "completion_tokens",
        "time_to_first_token",
        "duration",
        "error",
    )
    readonly_fields = fields
    ordering = ("step",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Run)
class RunAdmin(RecordAdmin):
    list_display = (
        "__str__",
        "conversation",
        "status",
        "model",
        "steps",
        "total_tokens",
        "time_to_first_token",
        "duration",
        "started_at",
    )
    list_filter = ("status", "model", "started_at")
    search_fields = ("conversation__title", "model", "error", "worker")
    list_select_related = ("conversation",)
    inlines = (ModelCallInline,)
    fields = (
        "conversation",
        "created_by",
        "status",
        "model",
        "steps",
        "usage",
        "time_to_first_token",
        "duration",
        "error",
        "tool_call_pills",
        "parameters_display",
        "worker",
        "heartbeat_at",
        "started_at",
        "finished_at",
    )
    readonly_fields = ("usage", "tool_call_pills", "parameters_display", "started_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return super().get_queryset(request).select_related("conversation", "created_by")

    @admin.display(description="usage")
    def usage(self, obj: Run) -> str:
        return _usage(obj)

    @admin.display(description="tool calls")
    def tool_call_pills(self, obj: Run) -> SafeString | str:
        calls = obj.tool_calls.order_by("step", "position", "id")
        pills = format_html_join("", "{}", ((pill(call),) for call in calls))
        return format_html('<span class="pills">{}</span>', pills) if pills else "—"

    @admin.display(description="parameters")
    def parameters_display(self, obj: Run) -> SafeString:
        return format_html('<pre class="chat-pre">{}</pre>', pretty_json(obj.parameters))


def _usage(obj: Run | ModelCall) -> str:
    return (
        f"{obj.prompt_tokens:,} prompt + {obj.completion_tokens:,} completion = "
        f"{obj.total_tokens:,} tokens"
    )


@admin.register(ModelCall)
class ModelCallAdmin(RecordAdmin):
    list_display = (
        "__str__",
        "run",
        "model",
        "http_status",
        "finish_reason",
        "total_tokens",
        "time_to_first_token",
        "duration",
        "failed",
        "started_at",
    )
    list_filter = ("http_status", "finish_reason", "model", "started_at")
    search_fields = ("model", "finish_reason", "error", "run__conversation__title")
    list_select_related = ("run",)
    fields = (
        "run",
        "conversation",
        "step",
        "model",
        "http_status",
        "attempts",
        "finish_reason",
        "usage",
        "time_to_first_token",
        "duration",
        "error",
        "started_at",
        "request_json",
    )
    readonly_fields = ("conversation", "usage", "request_json", "started_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[ModelCall]:
        return super().get_queryset(request).select_related("run__conversation")

    @admin.display(description="failed", boolean=True)
    def failed(self, obj: ModelCall) -> bool:
        return bool(obj.error)

    @admin.display(description="conversation")
    def conversation(self, obj: ModelCall) -> SafeString | str:
        return admin_link(obj.run.conversation)

    @admin.display(description="usage")
    def usage(self, obj: ModelCall) -> str:
        return _usage(obj)

    @admin.display(description="request sent (secrets redacted)")
    def request_json(self, obj: ModelCall) -> SafeString:
        return folded(pretty_json(redact(obj.request, profile_keys())))


@admin.register(ToolCall)
class ToolCallAdmin(RecordAdmin):
    list_display = (
        "tool",
        "name",
        "status",
        "run",
        "conversation",
        "step",
        "duration",
        "started_at",
    )
    list_display_links = ("name",)
    list_filter = ("status", "name", "started_at")
    search_fields = ("name", "call_id")
    list_select_related = ("run__conversation",)
    fields = (
        "tool",
        "name",
        "status",
        "call_id",
        "run",
        "conversation",
        "message",
        "step",
        "position",
        "arguments_display",
        "result_display",
        "error",
        "started_at",
        "finished_at",
        "duration",
    )
    readonly_fields = ("tool", "conversation", "arguments_display", "result_display")

    def get_queryset(self, request: HttpRequest) -> QuerySet[ToolCall]:
        return super().get_queryset(request).select_related("run__conversation", "message")

    @admin.display(description="tool", ordering="name")
    def tool(self, obj: ToolCall) -> SafeString:
        return pill(obj, link=False)

    @admin.display(description="conversation", ordering="run__conversation")
    def conversation(self, obj: ToolCall) -> SafeString | str:
        return admin_link(obj.run.conversation)

    @admin.display(description="arguments")
    def arguments_display(self, obj: ToolCall) -> SafeString:
        return folded(pretty(obj.arguments))

    @admin.display(description="result")
    def result_display(self, obj: ToolCall) -> SafeString:
        return folded(pretty(obj.result))


@admin.register(Message)
class MessageAdmin(RecordAdmin):
    list_display = ("__str__", "conversation", "role", "excerpt", "tools", "run", "created_at")
    list_filter = ("role", "created_at")
    search_fields = ("content", "tool_call_id", "conversation__title")
    list_select_related = ("conversation", "run")
    fields = (
        "conversation",
        "run",
        "index",
        "role",
        "content_display",
        "reasoning_display",
        "tool_calls_display",
        "tool_call_id",
        "created_at",
    )
    readonly_fields = ("content_display", "reasoning_display", "tool_calls_display", "created_at")
    ordering = ("-created_at", "-id")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        return super().get_queryset(request).select_related("conversation", "run")

    @admin.display(description="content")
    def excerpt(self, obj: Message) -> str:
        text = " ".join((obj.content or "").split())
        return text if len(text) <= 80 else text[:79] + "…"

    @admin.display(description="tool calls")
    def tools(self, obj: Message) -> str:
        names = [agent.ToolCall.from_openai(call).name for call in obj.tool_calls or ()]
        return ", ".join(agent.humanize(name) for name in names) or "—"

    @admin.display(description="content")
    def content_display(self, obj: Message) -> SafeString | str:
        if obj.content is None:
            return "(none)"
        return folded(pretty(obj.content) if obj.role == Message.Role.TOOL else obj.content)

    @admin.display(description="reasoning")
    def reasoning_display(self, obj: Message) -> SafeString:
        return folded(obj.reasoning)

    @admin.display(description="tool calls")
    def tool_calls_display(self, obj: Message) -> SafeString | str:
        if not obj.tool_calls:
            return "—"
        return format_html('<pre class="chat-pre">{}</pre>', pretty_json(obj.tool_calls))


@admin.register(HistoryRepair)
class HistoryRepairAdmin(RecordAdmin):
    list_display = ("__str__", "conversation", "run", "reason", "added_count", "removed_count")
    list_filter = ("created_at",)
    search_fields = ("reason", "conversation__title")
    list_select_related = ("conversation", "run")
    fields = ("conversation", "run", "reason", "added_display", "removed_display", "created_at")
    readonly_fields = ("added_display", "removed_display", "created_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[HistoryRepair]:
        return super().get_queryset(request).select_related("conversation", "run")

    @admin.display(description="added")
    def added_count(self, obj: HistoryRepair) -> int:
        return len(obj.added or ())

    @admin.display(description="removed")
    def removed_count(self, obj: HistoryRepair) -> int:
        return len(obj.removed or ())

    @admin.display(description="messages added")
    def added_display(self, obj: HistoryRepair) -> SafeString:
        return folded(pretty_json(obj.added))

    @admin.display(description="messages removed")
    def removed_display(self, obj: HistoryRepair) -> SafeString:
        return folded(pretty_json(obj.removed))
