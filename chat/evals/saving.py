"""Saving a moment of the chat as a case: the form opened under a reply, a tool call or one of
its annotations, and the two views that show and save it.

Anyone who can read a conversation may save a case from it (a teammate on a shared
conversation too): a case is the team's, keeps its own copy of the moment, and changes nothing
in the conversation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_http_methods

from chat import access
from chat.agent import decisions
from chat.evals import cases
from chat.evals.annotations import ExpectedCallForm
from chat.evals.annotations import offered_tools as offered_names
from chat.models import (
    Annotation,
    Case,
    CaseSet,
    CaseSource,
    Conversation,
    Message,
    Run,
    ToolCall,
    expected_call,
    expected_field,
)
from chat.transcripts.limits import ARGUMENT_CHARS, NOTE_CHARS

if TYPE_CHECKING:
    from chat.views import AuthenticatedRequest

TEMPLATE = "chat/case_form.html"
DEFAULT_SET = "default"
STILL_RUNNING = "The reply is still being written: save it as a case once it is finished."
GONE = "The annotation this option followed is gone: choose another expectation."
SOURCES = {
    "reply": CaseSource.REPLY,
    "annotation": CaseSource.ANNOTATION,
    "no_tool": CaseSource.GIVEN,
    "other": CaseSource.GIVEN,
}
"""Each choice of the form's "what is expected", and the source the case records for it."""
FIELDS = ("set_name", "title", "expect", "tool", "arguments", "note")
"""What the form keeps of a refused POST: everything the reader chose and typed."""


class CaseForm(ExpectedCallForm):
    """The case set, a title, what is expected next (and the call when it is another), a note."""

    set_name = forms.CharField(
        max_length=100, label="Case set", error_messages={"required": "Name the case set."}
    )
    title = forms.CharField(required=False, max_length=200, label="Title")
    expect = forms.ChoiceField(
        choices=[(value, value) for value in SOURCES],
        error_messages={
            "required": "Choose what is expected next.",
            "invalid_choice": "Choose what is expected next.",
        },
    )
    tool = forms.CharField(required=False, max_length=200, label="Tool")
    arguments = forms.CharField(
        required=False, max_length=ARGUMENT_CHARS, strip=False, label="Arguments"
    )
    note = forms.CharField(required=False, max_length=NOTE_CHARS, label="Note")

    WHOLE = ("required", "invalid_choice", "no_tool")
    """Error codes whose text is a sentence of its own, shown without the field's name."""

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        cleaned["expected"] = (
            dict(decisions.NO_TOOL) if cleaned.get("expect") == "no_tool" else None
        )
        if cleaned.get("expect") == "other" and not self.errors:
            try:
                call = expected_call(
                    tool=cleaned.get("tool", ""),
                    arguments=cleaned.get("arguments", ""),
                    no_tool=False,
                )
            except ValidationError as exc:
                self.problem_field = (
                    "arguments" if expected_field(exc) == "expected_arguments" else "tool"
                )
                raise
            if call is None:
                self.problem_field = "tool"
                raise ValidationError("Name the tool of the other call.", code="no_tool")
            cleaned["expected"] = decisions.expectation([(call["tool"], call["arguments"])])
        return cleaned

    @property
    def error_line(self) -> str:
        """The first problem, as one line (a field's problem names the field)."""
        for name, errors in self.errors.as_data().items():
            problem = errors[0]
            text = " ".join(problem.messages)
            if name == NON_FIELD_ERRORS or problem.code in self.WHOLE:
                return text
            return f"{self.fields[name].label}: {text}"
        return ""


@dataclass
class Saving:
    """What the form shows for one target (a reply, or a tool call, perhaps from one of its
    annotations): the moment, the stored decision, the annotation it may follow instead."""

    run: Run
    call: ToolCall | None
    origin: int | None
    """The annotation whose "Save as case" opened the form."""
    index: int = 0
    rows: list[Message] = field(default_factory=list)
    stored: dict[str, Any] = field(default_factory=dict)
    annotation: Annotation | None = None
    followed: dict[str, Any] | None = None
    """What `annotation` says is expected, or None when it says nothing to replay (`refused`)."""
    refused: str = ""
    offered: list[str] = field(default_factory=list)
    set_names: list[str] = field(default_factory=list)
    values: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""
    error_field: str = ""
    arguments_chars = ARGUMENT_CHARS
    note_chars = NOTE_CHARS

    @property
    def key(self) -> str:
        """What the ids of this form's elements and of its slot end with (case_form.html#key)."""
        if self.call is None:
            return f"run-{self.run.pk}"
        return f"call-{self.call.pk}" + (f"-note-{self.origin}" if self.origin else "")

    @property
    def url(self) -> str:
        conversation = self.run.conversation_id
        if self.call is None:
            return reverse("chat:reply_case", args=[conversation, self.run.pk])
        url = reverse("chat:tool_call_case", args=[conversation, self.call.pk])
        return f"{url}?annotation={self.origin}" if self.origin else url

    @property
    def stored_text(self) -> str:
        return decisions.summary(self.stored)

    @property
    def why(self) -> str:
        """Why what the reply did is what it is, when that needs saying (`cases.why_expected`)."""
        return cases.why_expected(self.rows[-1].role if self.rows else "", self.stored)

    @property
    def followed_text(self) -> str:
        return decisions.summary(self.followed) if self.followed is not None else ""

    @property
    def placeholder(self) -> tuple[str, str]:
        """The tool and arguments of "Another call" before anything is typed: the stored call's."""
        calls = self.stored.get("tool_calls")
        if not calls:
            return (self.offered[0] if self.offered else ""), "{}"
        return calls[0]["name"], json.dumps(calls[0]["arguments"], ensure_ascii=False)


def last_set_name(user: Any) -> str:
    """The set of the reader's newest case, so a series of cases lands in one set."""
    newest = Case.objects.filter(created_by=user).select_related("case_set").order_by("-pk").first()
    return newest.case_set.name if newest is not None else DEFAULT_SET


def annotation_to_follow(
    run: Run, call: ToolCall | None, reply: Message | None, viewer: Any, pk: int | None
) -> Annotation | None:
    """The annotation the form offers to follow: the one named by `pk`, else among those that
    say which call was expected, the viewer's own (their newest), else the newest.

    For a reply, only annotations of the calls of its first turn count: a case keeps the
    moment of that turn's decision, and an annotation of a later call is about another moment.
    """
    if call is None and reply is None:
        return None
    found = Annotation.objects.filter(run=run, tool_call__isnull=False).select_related(
        "author", "tool_call__message"
    )
    annotations = list(
        found.filter(tool_call=call) if call is not None else found.filter(tool_call__message=reply)
    )
    if pk is not None:
        return next((a for a in annotations if a.pk == pk), None)
    said = [a for a in annotations if a.expected is not None]
    pool = [a for a in said if a.author_id == getattr(viewer, "pk", None)] or said
    return max(pool, key=lambda a: (a.updated_at, a.pk), default=None)


def _prepare(saving: Saving, viewer: Any, pk: int | None) -> None:
    """The moment and everything the form offers at it; CaseRefused when there is none."""
    run, call = saving.run, saving.call
    saving.index = cases.moment_of_tool_call(call) if call else cases.moment_of_reply(run)
    found = cases.moment(run.conversation, saving.index)
    saving.rows = found.rows
    saving.stored = cases.stored_decision(found.reply)
    saving.annotation = annotation_to_follow(run, call, found.reply, viewer, pk)
    if saving.annotation is not None:
        try:
            saving.followed = cases.expectation_from_annotation(saving.annotation)
        except cases.CaseRefused as exc:
            saving.refused = str(exc)
    if call is not None:
        saving.offered = offered_names(call)
    else:
        saving.offered = sorted(
            {c["name"] for c in saving.stored.get("tool_calls", [])}
            | {
                definition.name
                for entry in cases.offered_tools(run.conversation, found.reply)
                if (definition := decisions.tool_definition(entry))
            }
        )
    saving.set_names = list(CaseSet.objects.values_list("name", flat=True))


def _initial(saving: Saving, viewer: Any) -> dict[str, Any]:
    follow = saving.origin and saving.annotation is not None and saving.followed is not None
    return {
        "set_name": last_set_name(viewer),
        "title": cases.default_title(saving.rows),
        "expect": "annotation" if follow else "reply",
        "tool": "",
        "arguments": "",
        "note": "",
    }


def _annotated(request: AuthenticatedRequest, pk: int) -> Conversation:
    """A conversation the user may save a case from (`chat.access`: a shared one too)."""
    return access.conversation(request.user, access.Action.ANNOTATE, pk)


def _origin(request: AuthenticatedRequest) -> int | None:
    value = request.GET.get("annotation", "")
    return int(value) if value.isdigit() else None


@login_required
@require_http_methods(["GET", "POST"])
def reply_case(request: AuthenticatedRequest, pk: int, run_pk: int) -> HttpResponse:
    """The form that saves a reply's moment as a case (GET), or the case saved (POST)."""
    run = get_object_or_404(_annotated(request, pk).runs.select_related("conversation"), pk=run_pk)
    return _case(request, Saving(run, None, None))


@login_required
@require_http_methods(["GET", "POST"])
def tool_call_case(request: AuthenticatedRequest, pk: int, tool_call_pk: int) -> HttpResponse:
    """The form that saves the moment a tool call was decided as a case (GET), or the case
    saved (POST); `?annotation=` when it was opened from one of the call's annotations."""
    call = get_object_or_404(
        ToolCall.objects.select_related("run__conversation", "message"),
        pk=tool_call_pk,
        run__conversation=_annotated(request, pk),
    )
    return _case(request, Saving(call.run, call, _origin(request)))


def _case(request: AuthenticatedRequest, saving: Saving) -> HttpResponse:
    page = reverse("chat:conversation_detail", args=[saving.run.conversation_id])
    if saving.run.is_active:
        return _refused(request, saving, STILL_RUNNING, 409, page)
    if request.method == "POST":
        chosen = request.POST.get("annotation", "")
        follow = int(chosen) if chosen.isdigit() else None
    else:
        follow = saving.origin
    try:
        _prepare(saving, request.user, follow)
    except cases.CaseRefused as exc:
        return _refused(request, saving, str(exc), 422, page)
    if request.method == "GET":
        saving.values = _initial(saving, request.user)
        return _form(request, saving)
    saving.values = {name: request.POST.get(name, "") for name in FIELDS}
    try:
        case = _save(request, saving)
    except cases.CaseRefused as exc:
        if not request.htmx:
            messages.error(request, str(exc))
            return redirect(f"{page}#reply-{saving.run.pk}")
        saving.error = str(exc)
        return _form(request, saving, 422)
    said = f"Saved as case {case.pk} in “{case.case_set.name}”."
    if not request.htmx:
        messages.success(request, said)
        return redirect(f"{page}#reply-{saving.run.pk}")
    html = render_to_string(
        f"{TEMPLATE}#saved",
        {"case": case, "open_url": case_url(case, request.user), "key": saving.key},
    )
    html += render_to_string("chat/conversation.html#announce", {"announce": said, "oob": True})
    return HttpResponse(html)


def _save(request: AuthenticatedRequest, saving: Saving) -> Case:
    """The case the POST asks for, or CaseRefused with the line the form shows."""
    form = CaseForm(request.POST)
    if not form.is_valid():
        saving.error_field = form.error_field
        raise cases.CaseRefused(form.error_line)
    expect = form.cleaned_data["expect"]
    expected = form.cleaned_data["expected"]
    if expect == "reply":
        expected = saving.stored
    elif expect == "annotation":
        if saving.annotation is None:
            raise cases.CaseRefused(GONE)
        if saving.followed is None:
            raise cases.CaseRefused(saving.refused)
        expected = saving.followed
    return cases.save_case(
        saving.run.conversation,
        saving.index,
        set_name=form.cleaned_data["set_name"],
        user=request.user,
        expected=expected,
        source=SOURCES[expect],
        title=form.cleaned_data["title"],
        note=form.cleaned_data["note"].replace("\r\n", "\n"),
    )


def case_url(case: Case, user: Any) -> str:
    """Where "Open" leads: the case set's page on Evaluations, else the case in the admin for
    a user who may view it there; no link when neither is there for them."""
    try:
        return reverse("chat:eval_set", args=[case.case_set_id])
    except NoReverseMatch:
        pass
    if not user.has_perm("chat.view_case"):
        return ""
    try:
        return reverse("admin:chat_case_change", args=[case.pk])
    except NoReverseMatch:
        return ""


def _form(request: AuthenticatedRequest, saving: Saving, status: int = 200) -> HttpResponse:
    return HttpResponse(render_to_string(f"{TEMPLATE}#form", {"s": saving}, request), status=status)


def _refused(
    request: AuthenticatedRequest, saving: Saving, line: str, status: int, page: str
) -> HttpResponse:
    if not request.htmx and request.method == "POST":
        messages.error(request, line)
        return redirect(f"{page}#reply-{saving.run.pk}")
    html = render_to_string(f"{TEMPLATE}#refused", {"s": saving, "line": line}, request)
    return HttpResponse(html, status=status)
