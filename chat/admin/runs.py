"""Runs and what they did: model calls and tool calls."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from chat import approval_record, media
from chat.agent import mcp_content
from chat.agent.redaction import redact
from chat.models import ModelCall, Run, RunLease, ToolCall
from chat.runs.providers import known_keys
from chat.templatetags.chat_tags import folded, pretty, pretty_json

from .annotations import AnnotationInline
from .base import ReadOnlyInline, RecordAdmin, RunRecordAdmin, admin_link, json_block, pill
from .filters import ApprovalFilter


class ModelCallInline(ReadOnlyInline):
    model = ModelCall
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

    def get_queryset(self, request: HttpRequest) -> Any:
        calls: Any = super().get_queryset(request)  # a ModelCallQuerySet
        return calls.without_payloads()


class RunLeaseInline(ReadOnlyInline):
    """Which processes held the run, and how each let go: a resumed run has several."""

    model = RunLease
    fields = ("worker", "acquired_at", "ended_at", "outcome")
    readonly_fields = fields
    ordering = ("acquired_at", "id")
    verbose_name_plural = "leases (the processes that executed the run)"


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
    list_filter = ("status", ApprovalFilter, "model", "started_at")
    search_fields = ("conversation__title", "model", "error", "worker")
    list_select_related = ("conversation",)
    inlines = (ModelCallInline, RunLeaseInline, AnnotationInline)
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
        "lease_expires_at",
        "resumes",
        "waiting_until",
        "started_at",
        "finished_at",
    )
    readonly_fields = ("usage", "tool_call_pills", "parameters_display", "started_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return super().get_queryset(request).select_related("conversation", "created_by")

    @admin.display(description="usage")
    def usage(self, obj: Run) -> str:
        return obj.usage_text()

    @admin.display(description="tool calls")
    def tool_call_pills(self, obj: Run) -> SafeString | str:
        calls = obj.tool_calls.order_by("step", "position", "id")
        pills = format_html_join("", "{}", ((pill(call),) for call in calls))
        return format_html('<span class="pills">{}</span>', pills) if pills else "—"

    @admin.display(description="parameters")
    def parameters_display(self, obj: Run) -> SafeString:
        return json_block(obj.parameters)


@admin.register(ModelCall)
class ModelCallAdmin(RunRecordAdmin):
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
        "raw_stream_display",
    )
    readonly_fields = ("conversation", "usage", "request_json", "raw_stream_display", "started_at")

    def get_queryset(self, request: HttpRequest) -> Any:
        """The request and stream are read when shown (a call's own page), not for the list."""
        return super().get_queryset(request).without_payloads()

    @admin.display(description="failed", boolean=True)
    def failed(self, obj: ModelCall) -> bool:
        return bool(obj.error)

    @admin.display(description="usage")
    def usage(self, obj: ModelCall) -> str:
        return obj.usage_text()

    @admin.display(description="request sent (secrets redacted)")
    def request_json(self, obj: ModelCall) -> SafeString:
        return folded(pretty_json(redact(obj.request, known_keys())))

    @admin.display(description="raw stream (milliseconds, line)")
    def raw_stream_display(self, obj: ModelCall) -> SafeString | str:
        return obj.pruned_note or folded(obj.raw_stream) or "(not kept)"


@admin.register(ToolCall)
class ToolCallAdmin(RunRecordAdmin):
    list_display = (
        "tool",
        "name",
        "server_display",
        "status",
        "run",
        "conversation",
        "step",
        "approval",
        "duration",
        "started_at",
    )
    list_display_links = ("name",)
    list_filter = ("status", "approval", "policy", "server", "name", "started_at")
    search_fields = ("name", "call_id", "server", "decision_reason")
    list_select_related = ("run__conversation",)
    fields = (
        "tool",
        "name",
        "server_display",
        "status",
        "call_id",
        "run",
        "conversation",
        "message",
        "step",
        "position",
        "arguments_display",
        "result_display",
        "raw_result_display",
        "error",
        "started_at",
        "finished_at",
        "duration",
        "policy",
        "decision",
        "approval",
        "asked_at",
        "decided_at",
        "decider",
        "edited_arguments_display",
        "decision_reason",
    )
    readonly_fields = (
        "tool",
        "server_display",
        "conversation",
        "arguments_display",
        "result_display",
        "raw_result_display",
        "decision",
        "decider",
        "edited_arguments_display",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[ToolCall]:
        queryset: QuerySet[ToolCall] = super().get_queryset(request)
        queryset = queryset.select_related("message", "decided_by")
        return queryset.defer("raw_result")  # loaded on its own page

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.media_view)
        media_url = path("<int:pk>/media/<int:number>/", view, name="chat_toolcall_media")
        return [media_url, *super().get_urls()]

    def media_view(self, request: HttpRequest, pk: int, number: int) -> HttpResponse:
        """An image, sound or file of a call's result, for the admin transcript."""
        call = get_object_or_404(ToolCall.objects.only("pk", "raw_result"), pk=pk)
        if not self.has_view_permission(request, call):
            raise PermissionDenied
        return media.serve(call, number)

    @admin.display(description="tool", ordering="name")
    def tool(self, obj: ToolCall) -> SafeString:
        return pill(obj, link=False)

    @admin.display(description="arguments (the model's)")
    def arguments_display(self, obj: ToolCall) -> SafeString:
        return folded(pretty(obj.arguments))

    @admin.display(description="arguments after an edit (as it ran)")
    def edited_arguments_display(self, obj: ToolCall) -> SafeString | str:
        return folded(pretty(obj.edited_arguments)) if obj.edited_arguments else "—"

    @admin.display(description="approval record")
    def decision(self, obj: ToolCall) -> str:
        found = approval_record.record(obj)
        return found.text if found else "— (no policy recorded: an evaluation's replay)"

    @admin.display(description="decided by", ordering="decided_by")
    def decider(self, obj: ToolCall) -> SafeString | str:
        if obj.decided_by is not None:
            return admin_link(obj.decided_by, obj.decider)
        return obj.decided_by_name or "—"

    @admin.display(description="MCP server", ordering="server")
    def server_display(self, obj: ToolCall) -> str:
        return obj.server or "— (built in)"

    @admin.display(description="result")
    def result_display(self, obj: ToolCall) -> SafeString:
        return folded(pretty(obj.result))

    @admin.display(description="raw result (as the MCP server sent it)")
    def raw_result_display(self, obj: ToolCall) -> SafeString | str:
        if obj.raw_result is None:
            return "—"
        return folded(pretty_json(mcp_content.for_display(obj.raw_result)))
