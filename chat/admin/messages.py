"""Messages and history repairs, one row at a time."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string
from django.urls import URLPattern, path
from django.utils.safestring import SafeString

from chat import agent, attachment_views, search
from chat.models import HistoryRepair, Message
from chat.templatetags.chat_tags import folded, pretty, pretty_json

from .base import RecordAdmin, json_block


class PathFilter(admin.SimpleListFilter):
    """Messages of the active path (no version), or of archived versions."""

    title = "path"
    parameter_name = "path"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("active", "Active path"), ("archived", "Archived versions")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in ("active", "archived"):
            return queryset.filter(version__isnull=self.value() == "active")
        return queryset


@admin.register(Message)
class MessageAdmin(RecordAdmin):
    list_display = (
        "__str__",
        "conversation",
        "path",
        "role",
        "excerpt",
        "tools",
        "run",
        "created_at",
    )
    list_filter = ("role", PathFilter, "created_at")
    search_fields = ("content",)
    search_help_text = "Words or \"a phrase\" in the message's text or its tool calls' names."
    list_select_related = ("conversation", "run", "version")
    fields = (
        "conversation",
        "path",
        "run",
        "index",
        "role",
        "content_display",
        "attachments_display",
        "reasoning_display",
        "tool_calls_display",
        "tool_call_id",
        "created_at",
    )
    readonly_fields = (
        "path",
        "content_display",
        "attachments_display",
        "reasoning_display",
        "tool_calls_display",
        "created_at",
    )
    ordering = ("-created_at", "-id")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        return super().get_queryset(request).select_related("conversation", "run", "version")

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Message], search_term: str
    ) -> tuple[QuerySet[Message], bool]:
        """The full-text index, as the conversations' search reads it (`chat.search`)."""
        return search.messages_matching(queryset, search.terms(search_term)), False

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.attachment_view)
        url = path("<int:pk>/attachments/<int:number>/", view, name="chat_message_attachment")
        return [url, *super().get_urls()]

    def attachment_view(self, request: HttpRequest, pk: int, number: int) -> HttpResponseBase:
        """A file sent with a user message, for the admin transcript."""
        message = get_object_or_404(Message.objects.only("pk", "attachments"), pk=pk)
        if not self.has_view_permission(request, message):
            raise PermissionDenied
        return attachment_views.serve(message, number)

    @admin.display(description="attachments")
    def attachments_display(self, obj: Message) -> SafeString | str:
        if not obj.attachments:
            return "—"
        context = {"message": obj, "in_admin": True}
        return SafeString(render_to_string("chat/attachments.html#sent", context))

    @admin.display(description="path", ordering="version")
    def path(self, obj: Message) -> str:
        return "active" if obj.version is None else str(obj.version)

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
        return json_block(obj.tool_calls)


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
