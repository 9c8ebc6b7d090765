"""Case sets with their cases: staff correct a case's title, note and expectation here."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import content_disposition_header
from django.utils.safestring import SafeString
from django.utils.text import slugify

from chat.agent import decisions
from chat.evals.records import export_lines
from chat.models import Case, CaseSet, EvalRun
from chat.templatetags.chat_tags import folded, pretty_json
from chat.transcripts.limits import NOTE_CHARS

from .annotations import excerpt
from .base import BoundedJSONField, LabAdmin, ReadOnlyInline, admin_link, json_block


def rate_text(passed: int, done: int) -> str:
    """`67% (2 of 3)`, or "—" before any attempt is judged."""
    return f"{passed / done:.0%} ({passed} of {done})" if done else "—"


def link_by_id(model: str, pk: int | None, text: Any) -> SafeString | str:
    """A link to a row's admin page from its id alone: no query for the row."""
    if pk is None:
        return "—"
    url = reverse(f"admin:chat_{model}_change", args=[pk])
    return format_html('<a href="{}">{}</a>', url, text)


class ExpectationField(BoundedJSONField):
    """The expectation as indented JSON, to read and edit."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        return json.dumps(value, indent=2, ensure_ascii=False)


class CaseForm(forms.ModelForm[Case]):
    """What staff may correct in a case; the expectation is checked by the model's validator."""

    expected = ExpectationField(
        widget=forms.Textarea(attrs={"rows": 8, "cols": 80}),
        help_text='{"no_tool": true}, or {"tool_calls": [{"name": "search_cards", '
        '"arguments": {"query": "pills"}}]}: expected arguments are the keys a call must hold.',
    )

    note = forms.CharField(required=False, max_length=NOTE_CHARS, widget=forms.Textarea)

    class Meta:
        model = Case
        fields = ("title", "case_set", "note", "expected")

    def clean_expected(self) -> Any:
        value = self.cleaned_data["expected"]
        try:
            return decisions.check_expectation(value)
        except ValueError:
            return value  # the model's validator says what is wrong with it


class CaseColumns:
    """What a case expects and how many results it recorded: a column in its set's rows and in
    the list of cases."""

    @admin.display(description="expects")
    def expects(self, obj: Case) -> str:
        return excerpt(obj.expected_text)

    @admin.display(description="fixtures")
    def fixture_count(self, obj: Case) -> int:
        return len(obj.fixtures or ())


class CaseInline(CaseColumns, ReadOnlyInline):
    """A set's cases, one summary row each, linking to the case."""

    model = Case
    fields = ("case_title", "expects", "fixture_count", "source", "created_at")
    readonly_fields = fields
    show_change_link = False  # the title is the link
    verbose_name = "case"

    @admin.display(description="title")
    def case_title(self, obj: Case) -> SafeString | str:
        return admin_link(obj, obj.title)


@admin.register(CaseSet)
class CaseSetAdmin(LabAdmin):
    list_display = ("name", "case_count", "last_evaluation", "created_at")
    search_fields = ("name",)
    search_help_text = "Words in the set's name."
    fields = ("name", "description", "case_count", "last_evaluation", "created_by", "created_at")
    readonly_fields = ("case_count", "last_evaluation", "created_by", "created_at")
    inlines = (CaseInline,)
    actions = ("export_as_jsonl",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[CaseSet]:
        """With `case_count` and the latest evaluation of the set (`last_run_id`, its passed and
        failed counts), as subqueries: a join over cases and runs would multiply rows."""
        queryset: QuerySet[CaseSet] = super().get_queryset(request)
        cases = (
            Case.objects.filter(case_set=OuterRef("pk"))
            .order_by()
            .values("case_set")
            .annotate(n=Count("pk"))
            .values("n")
        )
        last = EvalRun.objects.filter(case_set=OuterRef("pk")).order_by("-started_at", "-id")
        return queryset.select_related("created_by").annotate(
            case_count=Coalesce(Subquery(cases), 0),
            last_run_id=Subquery(last.values("pk")[:1]),
            last_passed=Subquery(last.values("passed")[:1]),
            last_failed=Subquery(last.values("failed")[:1]),
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Sets are made with their first case (the chat, `manage.py cases`)."""
        return False

    @admin.display(description="cases", ordering="case_count")
    def case_count(self, obj: CaseSet) -> int:
        return getattr(obj, "case_count", 0)

    @admin.display(description="last evaluation: passed")
    def last_evaluation(self, obj: CaseSet) -> SafeString | str:
        passed, failed = getattr(obj, "last_passed", None), getattr(obj, "last_failed", None)
        if passed is None or failed is None:
            return "—"
        text = rate_text(passed, passed + failed)
        return link_by_id("evalrun", getattr(obj, "last_run_id", None), text)

    @admin.action(description="Export as JSON Lines", permissions=["view"])
    def export_as_jsonl(self, request: HttpRequest, queryset: QuerySet[CaseSet]) -> HttpResponse:
        """The chosen sets' cases, one JSON line each (what `manage.py cases import` reads)."""
        sets = list(queryset.order_by("name"))
        cases = (
            Case.objects.filter(case_set__in=sets)
            .select_related("case_set")
            .order_by("case_set__name", "id")
        )
        name = slugify(sets[0].name, allow_unicode=True) if len(sets) == 1 else ""
        filename = f"cases-{name}.jsonl" if name else "cases.jsonl"
        return HttpResponse(
            "".join(line + "\n" for line in export_lines(cases)),
            content_type="application/jsonl; charset=utf-8",
            headers={"Content-Disposition": content_disposition_header(True, filename)},
        )


@admin.register(Case)
class CaseAdmin(CaseColumns, LabAdmin):
    form = CaseForm
    list_display = (
        "title",
        "case_set",
        "expects",
        "fixture_count",
        "source",
        "taken_from",
        "created_at",
    )
    list_filter = ("case_set", "source", "created_at")
    search_fields = ("title", "note")
    search_help_text = "Words in the title or the note."
    list_select_related = ("case_set", "conversation")
    readonly_fields = (
        "source",
        "taken_from",
        "messages_display",
        "tools_display",
        "fixtures_display",
        "parameters_display",
        "created_by",
        "created_at",
    )
    fields = ("title", "case_set", "note", "expected", *readonly_fields)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Case]:
        queryset: QuerySet[Case] = super().get_queryset(request)
        return queryset.select_related("case_set", "conversation", "created_by")

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Cases are taken from conversations (the chat, `manage.py cases`), or imported."""
        return False

    @admin.display(description="taken from", ordering="conversation")
    def taken_from(self, obj: Case) -> SafeString | str:
        at = "" if obj.at_message is None else f", after message {obj.at_message}"
        if obj.conversation is None:
            return "—" if obj.at_message is None else f"a conversation since deleted{at}"
        return format_html("{}{}", admin_link(obj.conversation), at)

    @admin.display(description="messages")
    def messages_display(self, obj: Case) -> SafeString:
        return folded(pretty_json(obj.messages))

    @admin.display(description="tools offered")
    def tools_display(self, obj: Case) -> SafeString:
        return folded(pretty_json(obj.tools))

    @admin.display(description="fixtures (recorded tool results)")
    def fixtures_display(self, obj: Case) -> SafeString:
        return folded(pretty_json(obj.fixtures))

    @admin.display(description="parameters")
    def parameters_display(self, obj: Case) -> SafeString:
        return json_block(obj.parameters)
