"""Evaluations with a verdict per case and attempt: records, read-only."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.templatetags.static import static
from django.utils.html import format_html
from django.utils.safestring import SafeString

from chat.models import EvalResult, EvalRun, ResultVerdict
from chat.templatetags.chat_tags import seconds

from .annotations import excerpt
from .base import ReadOnlyInline, RecordAdmin, admin_link, json_block
from .cases import link_by_id, rate_text

VERDICT_ICONS: dict[str, str] = {
    ResultVerdict.PASSED: "admin/img/icon-yes.svg",
    ResultVerdict.FAILED: "admin/img/icon-no.svg",
    ResultVerdict.ERROR: "admin/img/icon-alert.svg",
}


def verdict_pill(result: EvalResult) -> SafeString:
    """The verdict as a pill with the admin's own yes / no / alert icon (the colour), and the
    word beside it (the meaning, also without colour)."""
    icon = static(VERDICT_ICONS.get(result.verdict, "admin/img/icon-unknown.svg"))
    return format_html(
        '<span class="pill verdict-{}"><img src="{}" alt="" width="13" height="13"> {}</span>',
        result.verdict,
        icon,
        result.get_verdict_display(),
    )


class ResultMixin:
    """What the results list, a result's page and its evaluation's inline say of a result."""

    @admin.display(description="case", ordering="case_title")
    def case_link(self, obj: EvalResult) -> SafeString | str:
        return link_by_id("case", obj.case_id, obj.case_title) if obj.case_id else obj.case_title

    @admin.display(description="verdict", ordering="verdict")
    def verdict_display(self, obj: EvalResult) -> SafeString:
        return verdict_pill(obj)

    @admin.display(description="expected")
    def expected_display(self, obj: EvalResult) -> str:
        return excerpt(obj.expected_text)

    @admin.display(description="got")
    def got_display(self, obj: EvalResult) -> str:
        return excerpt(obj.got_text)

    @admin.display(description="latency", ordering="latency")
    def latency_display(self, obj: EvalResult) -> str:
        return seconds(obj.latency)

    @admin.display(description="tokens")
    def tokens(self, obj: EvalResult) -> int:
        return obj.tokens

    @admin.display(description="run (its model calls)")
    def run_link(self, obj: EvalResult) -> SafeString | str:
        return link_by_id("run", obj.run_id, f"Run {obj.run_id}")


class ResultInline(ResultMixin, ReadOnlyInline):
    """An evaluation's results, in case order then attempt."""

    model = EvalResult
    fields = (
        "case_link",
        "attempt",
        "verdict_display",
        "expected_display",
        "got_display",
        "reason",
        "latency_display",
        "tokens",
        "run_link",
    )
    readonly_fields = fields
    ordering = ("case_id", "case_title", "attempt", "pk")
    verbose_name = "result"


@admin.register(EvalRun)
class EvalRunAdmin(RecordAdmin):
    list_display = (
        "id",
        "set_name",
        "label",
        "status",
        "progress",
        "pass_rate_display",
        "repeat",
        "continue_loop",
        "started_by",
        "started_at",
    )
    list_display_links = ("id",)
    list_filter = ("status", "set_name", "model", "started_at")
    search_fields = ("set_name", "label", "model", "error")
    list_select_related = ("started_by",)
    inlines = (ResultInline,)
    fields = (
        "set_link",
        "comparison",
        "label",
        "model",
        "base_url",
        "profile",
        "repeat",
        "continue_loop",
        "status",
        "progress",
        "pass_rate_display",
        "error",
        "worker",
        "heartbeat_at",
        "started_by",
        "started_at",
        "finished_at",
    )
    readonly_fields = ("set_link", "progress", "pass_rate_display", "started_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[EvalRun]:
        queryset: QuerySet[EvalRun] = super().get_queryset(request)
        return queryset.select_related("case_set", "comparison", "profile", "started_by")

    @admin.display(description="set")
    def set_link(self, obj: EvalRun) -> SafeString | str:
        if obj.case_set is None:
            return obj.set_name
        return admin_link(obj.case_set)

    @admin.display(description="passed / failed / total")
    def progress(self, obj: EvalRun) -> str:
        return f"{obj.passed} / {obj.failed} / {obj.total}"

    @admin.display(description="pass rate")
    def pass_rate_display(self, obj: EvalRun) -> str:
        return rate_text(obj.passed, obj.done)


@admin.register(EvalResult)
class EvalResultAdmin(ResultMixin, RecordAdmin):
    list_display = (
        "__str__",
        "eval_run",
        "case_link",
        "attempt",
        "verdict_display",
        "expected_display",
        "got_display",
        "latency_display",
        "tokens",
        "run_link",
        "created_at",
    )
    list_filter = ("verdict", ("eval_run", admin.RelatedOnlyFieldListFilter), "created_at")
    search_fields = ("case_title", "reason")
    search_help_text = "Words in the case's title or the reason."
    list_select_related = ("eval_run",)
    fields = (
        "eval_run",
        "case_link",
        "attempt",
        "verdict_display",
        "reason",
        "expected_json",
        "got_json",
        "answer",
        "run_link",
        "latency_display",
        "prompt_tokens",
        "completion_tokens",
        "created_at",
    )
    readonly_fields = (
        "case_link",
        "verdict_display",
        "expected_json",
        "got_json",
        "run_link",
        "latency_display",
        "created_at",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[EvalResult]:
        queryset: QuerySet[EvalResult] = super().get_queryset(request)
        return queryset.select_related("eval_run")

    @admin.display(description="expected")
    def expected_json(self, obj: EvalResult) -> SafeString:
        return format_html("{}{}", obj.expected_text, json_block(obj.expected))

    @admin.display(description="got")
    def got_json(self, obj: EvalResult) -> SafeString | str:
        return "—" if obj.got is None else format_html("{}{}", obj.got_text, json_block(obj.got))
