"""Annotations: the team's Good and Bad on replies and tool calls, listed, filtered and edited
by staff with the chat's rules; read-only on their run's page."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from chat.models import Annotation, Verdict, expected_call, expected_field
from chat.transcripts.limits import ARGUMENT_CHARS, NOTE_CHARS

from .base import LabAdmin, ReadOnlyInline, admin_link

EXCERPT_CHARS = 80


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def expected_text(annotation: Annotation) -> str:
    """The expected call in one line: `get_current_time {"timezone": "UTC"}`, or "no tool"."""
    if annotation.expects_no_tool:
        return "no tool should be called"
    if annotation.expected_tool:
        return f"{annotation.expected_tool} {annotation.expected_arguments}"
    return "—"


class AnnotationForm(forms.ModelForm[Annotation]):
    """The annotation with its expected call as the chat asks for it, validated by the same
    rule (`expected_call`); the author is whoever adds it."""

    expected_tool = forms.CharField(
        required=False, max_length=200, help_text="Tool calls only: the call that was expected."
    )
    expected_arguments = forms.CharField(
        required=False,
        max_length=ARGUMENT_CHARS,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60}),
        help_text='A JSON object, like {"timezone": "UTC"}; empty: {}.',
    )
    no_tool = forms.BooleanField(required=False, label="No tool should be called")
    note = forms.CharField(required=False, max_length=NOTE_CHARS, widget=forms.Textarea)
    verdict = forms.ChoiceField(
        choices=[("", "None (a note only)"), *Verdict.choices],
        required=False,
        help_text="A note may stand without Good or Bad, as in the chat.",
    )

    author: Any = None
    """The user adding the annotation (set by the admin for each request)."""

    class Meta:
        model = Annotation
        fields = ("run", "tool_call", "verdict", "note")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None and not self.is_bound:
            self.initial.update(
                expected_tool=self.instance.expected_tool,
                expected_arguments=self.instance.expected_arguments,
                no_tool=self.instance.expects_no_tool,
            )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        try:
            expected = expected_call(
                tool=cleaned.get("expected_tool", ""),
                arguments=cleaned.get("expected_arguments", ""),
                no_tool=bool(cleaned.get("no_tool")),
            )
        except ValidationError as exc:
            self.add_error(expected_field(exc), exc)
            return cleaned
        instance = self.instance
        run = cleaned.get("run", instance.run if instance.run_id else None)
        call = cleaned.get("tool_call", instance.tool_call)
        if expected is not None and call is None:
            self.add_error("tool_call", "Only a tool call has an expected call: choose one.")
            return cleaned
        instance.expected = expected
        author = instance.author if instance.author_id else self.author
        if author is not None and run is not None:
            clash = Annotation.objects.filter(author=author, run=run, tool_call=call)
            if clash.exclude(pk=instance.pk).exists():
                self.add_error(
                    None,
                    f"{author.get_username()} has already annotated this "
                    f"{'tool call' if call else 'reply'}: change that annotation instead.",
                )
        return cleaned


class ExpectedFilter(admin.SimpleListFilter):
    title = "expected call"
    parameter_name = "expected"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("call", "A tool call"), ("no_tool", "No tool"), ("none", "None")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        match self.value():
            case "call":
                return queryset.filter(expected__has_key="tool")
            case "no_tool":
                return queryset.filter(expected__has_key="no_tool")
            case "none":
                return queryset.filter(expected__isnull=True)
        return queryset


class TargetFilter(admin.SimpleListFilter):
    title = "on"
    parameter_name = "on"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("reply", "A reply"), ("tool_call", "A tool call")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in ("reply", "tool_call"):
            return queryset.filter(tool_call__isnull=self.value() == "reply")
        return queryset


class AnnotationMixin:
    """What the list, the change page and the run's inline say of an annotation."""

    @admin.display(description="tool call", ordering="tool_call__name")
    def tool_call_name(self, obj: Annotation) -> SafeString | str:
        if obj.tool_call is None:
            return "— (the reply)"
        return admin_link(obj.tool_call, obj.tool_call.name)

    @admin.display(description="note")
    def note_excerpt(self, obj: Annotation) -> str:
        return excerpt(obj.note) or "—"

    @admin.display(description="expected call")
    def expected_display(self, obj: Annotation) -> str:
        return excerpt(expected_text(obj))


@admin.register(Annotation)
class AnnotationAdmin(AnnotationMixin, LabAdmin):
    form = AnnotationForm
    list_display = (
        "__str__",
        "verdict",
        "author",
        "conversation",
        "run",
        "tool_call_name",
        "note_excerpt",
        "expected_display",
        "created_at",
    )
    list_filter = (
        "verdict",
        ("author", admin.RelatedOnlyFieldListFilter),
        ExpectedFilter,
        TargetFilter,
        "created_at",
    )
    search_fields = ("note",)
    search_help_text = "Words in the note."
    list_select_related = ("author", "run__conversation", "tool_call")
    raw_id_fields = ("run", "tool_call")
    readonly_fields = ("author", "conversation", "created_at", "updated_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Annotation]:
        queryset: QuerySet[Annotation] = super().get_queryset(request)
        return queryset.select_related("author", "run__conversation", "tool_call")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        editable = ("verdict", "note", "expected_tool", "expected_arguments", "no_tool")
        if obj is None:
            return ("run", "tool_call", *editable)
        return ("author", "conversation", "run", "tool_call", *editable, "created_at", "updated_at")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        """On a saved annotation, who wrote it and what it judges stay as they are."""
        fixed = ("run", "tool_call") if obj is not None else ()
        return (*self.readonly_fields, *fixed)

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form: Any = super().get_form(request, obj, change, **kwargs)
        form.author = request.user  # a class of its own per request (modelform_factory)
        return form

    def save_model(self, request: HttpRequest, obj: Annotation, form: Any, change: bool) -> None:
        if not change:
            obj.author = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Also whoever may delete conversations: deleting one takes its annotations."""
        if super().has_delete_permission(request, obj):
            return True
        return obj is not None and request.user.has_perm("chat.delete_conversation")

    @admin.display(description="conversation", ordering="run__conversation")
    def conversation(self, obj: Annotation) -> SafeString | str:
        return admin_link(obj.run.conversation)


class AnnotationInline(AnnotationMixin, ReadOnlyInline):
    """A run's annotations, on its page: who judged the reply or which call, and how."""

    model = Annotation
    fields = (
        "author",
        "tool_call_name",
        "verdict",
        "note",
        "expected_display",
        "created_at",
    )
    readonly_fields = fields
    verbose_name = "annotation"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Annotation]:
        queryset: QuerySet[Annotation] = super().get_queryset(request)
        return queryset.select_related("author", "tool_call")
