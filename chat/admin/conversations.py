"""Conversations: the list with counts and filters, the page with the transcript."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from chat import access, search, windows
from chat.forms import DEFAULT_PROVIDER_LABEL
from chat.models import Conversation, ConversationQuerySet, EvalResult, Purpose
from chat.models.agents import BUILT_IN_NAME
from chat.runs.providers import model_expression

from .base import LabAdmin, admin_link, json_block
from .filters import AgentFilter, ModelFilter, ProviderFilter, PurposeFilter, RunStatusFilter
from .transcript import transcript

ADMIN_HITS = 500
"""Conversations a search in the admin finds at most: the most recent that match."""


@admin.register(Conversation)
class ConversationAdmin(LabAdmin):
    list_display = (
        "__str__",
        "owner",
        "provider",
        "model_name",
        "agent_version_link",
        "run_count",
        "tool_call_count",
        "tokens",
        "shared",
        "purpose",
        "updated_at",
    )
    list_filter = (
        PurposeFilter,
        ("owner", admin.RelatedOnlyFieldListFilter),
        "shared",
        ProviderFilter,
        ModelFilter,
        AgentFilter,
        RunStatusFilter,
        "updated_at",
        "created_at",
    )
    search_fields = ("title",)
    search_help_text = (
        f'Words or "a phrase" in the title, message text or tool names (the {ADMIN_HITS} most '
        "recent)."
    )
    list_select_related = ("owner", "profile", "agent_version__agent")
    fields = (
        "owner",
        "title",
        "forked_from",
        "fork_list",
        "provider",
        "model_name",
        "agent_version_link",
        "parameters_display",
        "run_count",
        "tool_call_count",
        "tokens",
        "shared",
        "purpose",
        "evaluation",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields[2:]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        queryset = cast(ConversationQuerySet, super().get_queryset(request))
        related = queryset.select_related("owner", "profile", "agent_version__agent")
        with_stats = related.with_stats()
        return with_stats.annotate(model_name=model_expression())

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Conversation], search_term: str
    ) -> tuple[QuerySet[Conversation], bool]:
        """The ADMIN_HITS most recent with every term in the title, or in a message's text or
        its tool calls' names (any message, any version): the sidebar's rule, `everywhere`."""
        looked_for = search.terms(search_term)
        if not looked_for:
            return queryset, False
        pks = search.found(
            queryset, looked_for, count=ADMIN_HITS, everywhere=True, walk=2 * ADMIN_HITS
        )
        return queryset.filter(pk__in=pks), False

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
            context["transcript"] = transcript(obj, windows.requested(obj, request.GET))
            # Back to the chat page, for whoever may open it there (staff get no more there).
            if access.may(request.user, access.Action.READ, obj):
                context["chat_url"] = reverse("chat:conversation_detail", args=[obj.pk])
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description="provider", ordering="profile__name")
    def provider(self, obj: Conversation) -> SafeString | str:
        if obj.profile is None:
            return DEFAULT_PROVIDER_LABEL
        return admin_link(obj.profile)

    @admin.display(description="model", ordering="model_name")
    def model_name(self, obj: Conversation) -> str:
        return getattr(obj, "model_name", "") or "—"

    @admin.display(description="agent version", ordering="agent_version__agent__name")
    def agent_version_link(self, obj: Conversation) -> SafeString | str:
        """The version it started from, and whether its settings changed since (no query: the
        version is selected with the conversation)."""
        version = obj.agent_version
        if version is None:
            return BUILT_IN_NAME
        link = admin_link(version)
        return format_html("{} (changed since)", link) if obj.changed_from() else link

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
        return json_block(obj.parameters)

    @admin.display(description="forked from")
    def forked_from(self, obj: Conversation) -> SafeString | str:
        if obj.parent is None:
            return "—" if obj.forked_at is None else "a conversation since deleted"
        return format_html("{} (after message {})", admin_link(obj.parent), obj.forked_at)

    @admin.display(description="forks")
    def fork_list(self, obj: Conversation) -> SafeString | str:
        forks = obj.forks.order_by("pk")
        return format_html_join(", ", "{}", ((admin_link(fork),) for fork in forks)) or "—"

    @admin.display(description="evaluation")
    def evaluation(self, obj: Conversation) -> SafeString | str:
        """A replay's result and its evaluation: the way back from the run it made."""
        if obj.purpose != Purpose.EVAL:
            return "—"
        results = EvalResult.objects.filter(run__conversation=obj).select_related("eval_run")
        pairs = ((admin_link(r), admin_link(r.eval_run)) for r in results.order_by("pk"))
        return format_html_join(", ", "{} in {}", pairs) or "—"
