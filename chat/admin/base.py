"""What every admin page of the lab shares: the look, lists that do not count whole tables,
read-only records, links and pills."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString

from chat.models import ModelCall, ToolCall
from chat.templatetags.chat_tags import pill as render_pill
from chat.templatetags.chat_tags import pretty_json
from chat.transcripts.limits import JsonRefused, load_json


def pill(call: ToolCall, *, link: bool = True) -> SafeString:
    url = reverse("admin:chat_toolcall_change", args=[call.pk]) if link else ""
    return SafeString(render_pill(call.name, call.status, call.error, url, failure=call.failure))


def admin_link(obj: Any, text: Any = None) -> SafeString | str:
    if obj is None:
        return "—"
    opts = obj._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, obj if text is None else text)


COUNT_UP_TO = 10_000
"""Rows a list counts exactly; past that it says this many (narrow the list to see further)."""


class EstimatingPaginator(Paginator[Any]):
    """A list's pages without counting a whole table: an unfiltered table on PostgreSQL is as
    long as the planner's estimate (pg_class.reltuples) once that passes COUNT_UP_TO; any other
    list counts at most COUNT_UP_TO + 1 rows, so a filter or a search never costs a full
    count either."""

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if not isinstance(rows, QuerySet):
            return super().count
        if not rows.query.where:
            estimate = estimated_rows(rows)
            if estimate is not None and estimate > COUNT_UP_TO:
                return estimate
        return min(rows.order_by().values("pk")[: COUNT_UP_TO + 1].count(), COUNT_UP_TO)


def estimated_rows(rows: QuerySet[Any]) -> int | None:
    """PostgreSQL's estimate of the rows of `rows`' table (kept by ANALYZE and autovacuum);
    None on other databases, or when the table was never analyzed."""
    connection = connections[rows.db]
    if connection.vendor != "postgresql":
        return None
    table = connection.ops.quote_name(rows.model._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)", [table])
        found = cursor.fetchone()
    return int(found[0]) if found and found[0] >= 0 else None


class LabAdmin(admin.ModelAdmin[Any]):
    """Shared look: the transcript stylesheet, and the chat's code highlighting. Lists never
    count a whole table: no "N total" beside a filtered list, and an estimating paginator."""

    paginator = EstimatingPaginator
    show_full_result_count = False

    class Media:
        css = {"all": ["chat/admin.css", "css/code.css", "css/palette.css", "css/attachments.css"]}


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


class RunRecordAdmin(RecordAdmin):
    """Rows that belong to a run: they link to the run's conversation."""

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).select_related("run__conversation")

    @admin.display(description="conversation", ordering="run__conversation")
    def conversation(self, obj: ModelCall | ToolCall) -> SafeString | str:
        return admin_link(obj.run.conversation)


class ReadOnlyInline(admin.TabularInline[Any, Any]):
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def json_block(value: Any) -> SafeString:
    return format_html('<pre class="chat-pre">{}</pre>', pretty_json(value))


class BoundedJSONField(forms.JSONField):
    """JSON read through the bounded gate (`chat.transcripts.limits.load_json`): nesting, NaN
    and lone surrogates are one error on the field, and the text is shown back as typed."""

    def to_python(self, value: Any) -> Any:
        if not isinstance(value, str) or value in self.empty_values:
            return super().to_python(value)
        try:
            return load_json(value)
        except JsonRefused as exc:
            if exc.decoding is not None:
                raise forms.ValidationError(
                    self.error_messages["invalid"], code="invalid"
                ) from None
            raise forms.ValidationError(
                f"Enter a valid JSON: {exc.reason}.", code="invalid"
            ) from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        if not isinstance(data, str):
            return super().bound_data(data, initial)
        try:
            return load_json(data)
        except JsonRefused:
            return forms.fields.InvalidJSONInput(data)
