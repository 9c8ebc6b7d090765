"""Annotating replies and tool calls from the chat: the form, what the page shows of a target's
annotations (`Judgements`), and the two views that save them.

Any logged-in user who can read a conversation may annotate it (a team member judging a shared
conversation): an annotation is a row of its own and changes nothing in the conversation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.http import HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from chat import access
from chat.agent import decisions, wire
from chat.models import (
    NO_TOOL,
    Annotation,
    Conversation,
    ModelCall,
    Run,
    ToolCall,
    Verdict,
    expected_call,
    expected_field,
)
from chat.transcripts.limits import ARGUMENT_CHARS, NOTE_CHARS

if TYPE_CHECKING:
    from chat.views import AuthenticatedRequest

TEMPLATE = "chat/annotation.html"
FIELDS = ("note", "expected_tool", "expected_arguments", "no_tool")
"""What the form keeps of a POST when it is refused or cleared: the text the reader typed."""
EXPECTED = FIELDS[1:]
STILL_RUNNING = "The reply is still being written: judge it once it is finished."
NOTHING = "Nothing to save: write a note, say which call was expected, or mark it Good or Bad."


class ExpectedCallForm(forms.Form):
    """A form with an expected call (`expected_call`), whose problem is a line of its own (a
    non-field error) about one field: `problem_field`."""

    problem_field = ""

    @property
    def error_field(self) -> str:
        """The field the first problem is about."""
        name = next(iter(self.errors), "")
        return self.problem_field if name == NON_FIELD_ERRORS else name


class AnnotationForm(ExpectedCallForm):
    """A verdict and a note; on a tool call, also the call that was expected. Each part may
    come alone: a note without a mark is a note, and an expected call without one implies it
    (`implied_verdict`)."""

    verdict = forms.ChoiceField(choices=Verdict.choices, required=False)
    note = forms.CharField(required=False, max_length=NOTE_CHARS)
    expected_tool = forms.CharField(required=False, max_length=200, label="Expected tool")
    expected_arguments = forms.CharField(
        required=False, max_length=ARGUMENT_CHARS, strip=False, label="Expected arguments"
    )
    no_tool = forms.BooleanField(required=False)

    def __init__(self, data: Mapping[str, Any], *, call: ToolCall | None) -> None:
        super().__init__(data)
        self.call = call
        if call is None:
            for name in EXPECTED:
                del self.fields[name]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        cleaned["expected"] = None
        # The expected call is read whatever else is wrong: every problem in one pass.
        if self.call is not None and not set(EXPECTED) & set(self.errors):
            try:
                cleaned["expected"] = expected_call(
                    tool=cleaned.get("expected_tool", ""),
                    arguments=cleaned.get("expected_arguments", ""),
                    no_tool=bool(cleaned.get("no_tool")),
                )
            except ValidationError as exc:
                self.problem_field = expected_field(exc)
                raise  # a line of its own that names the field; problem_field says which
        return cleaned

    @property
    def error_line(self) -> str:
        """Every problem, on one line (a field's problem names the field)."""
        lines = []
        for name, errors in self.errors.items():
            if name in (NON_FIELD_ERRORS, "verdict"):
                lines.append(str(errors[0]))
            else:
                label = self.fields[name].label or name.capitalize()
                lines.append(f"{label}: {errors[0]}")
        return " ".join(lines)


def implied_verdict(expected: Mapping[str, Any], call: ToolCall) -> str:
    """What an expected call says of `call` when no mark was given: Good when the call meets
    it (the evaluations' rule, `decisions.compare`), Bad when it differs."""
    arguments = decisions.parse_arguments(call.arguments)
    got = {
        "tool_calls": [
            {"name": call.name, "arguments": call.arguments if arguments is None else arguments}
        ]
    }
    if expected == NO_TOOL:
        wanted = dict(NO_TOOL)
    else:
        wanted = decisions.expectation([(expected["tool"], expected["arguments"])])
    return Verdict.GOOD if decisions.compare(wanted, got).passed else Verdict.BAD


@dataclass
class Judgements:
    """The annotations of a reply (its run) or of one of its tool calls, as the page shows them
    to `viewer`. A viewer of None: rendered for every socket of the conversation at once, so
    for no one in particular; the block then fetches the reader's own marks when it has any."""

    run: Run
    call: ToolCall | None
    annotations: list[Annotation]
    viewer: int | None
    values: Mapping[str, Any] | None = None
    error: str = ""
    error_field: str = ""
    offered: list[str] = field(default_factory=list)
    note_chars = NOTE_CHARS

    @classmethod
    def of(
        cls, run: Run, call: ToolCall | None, annotations: Iterable[Annotation], viewer: Any
    ) -> Judgements:
        """Those of `annotations` that judge this reply (no tool call) or this tool call."""
        target = call.pk if call is not None else None
        return cls(
            run,
            call,
            [a for a in annotations if a.tool_call_id == target],
            getattr(viewer, "pk", None) if getattr(viewer, "is_authenticated", False) else None,
        )

    @property
    def kind(self) -> str:
        return "call" if self.call is not None else "reply"

    @property
    def target(self) -> str:
        return "tool call" if self.call is not None else "reply"

    @property
    def key(self) -> str:
        return f"call-{self.call.pk}" if self.call is not None else f"run-{self.run.pk}"

    @property
    def url(self) -> str:
        conversation = self.run.conversation_id
        if self.call is not None:
            return reverse("chat:tool_call_annotation", args=[conversation, self.call.pk])
        return reverse("chat:reply_annotation", args=[conversation, self.run.pk])

    @property
    def mine(self) -> Annotation | None:
        if self.viewer is None:
            return None
        return next((a for a in self.annotations if a.author_id == self.viewer), None)

    @property
    def refresh(self) -> bool:
        """Whether the block asks for the reader's own version as soon as it is shown."""
        return self.viewer is None and bool(self.annotations)

    @property
    def good(self) -> int:
        return sum(a.verdict == Verdict.GOOD for a in self.annotations)

    @property
    def bad(self) -> int:
        return sum(a.verdict == Verdict.BAD for a in self.annotations)

    @property
    def summary(self) -> str:
        """ "Good 2 · Bad 1": the counts that are not zero."""
        counts = [("Good", self.good), ("Bad", self.bad)]
        return " · ".join(f"{word} {n}" for word, n in counts if n)

    @property
    def who(self) -> str:
        """Who marked what, for the summary's tooltip: "Good: ada, bob · Bad: carol"."""
        parts = []
        for verdict in Verdict:
            names = [a.author.get_username() for a in self.annotations if a.verdict == verdict]
            if names:
                parts.append(f"{verdict.label}: {', '.join(names)}")
        return " · ".join(parts)

    @property
    def mark(self) -> str:
        """The pill's marker: "bad" when anyone marked the call bad, else "good" (or "")."""
        return "bad" if self.bad else "good" if self.good else ""

    @property
    def fields(self) -> dict[str, Any]:
        """What the form's fields show: the text just sent (refused, or cleared), else the
        reader's saved annotation."""
        if self.values is not None:
            return {
                "note": self.values.get("note", ""),
                "expected_tool": self.values.get("expected_tool", ""),
                "expected_arguments": self.values.get("expected_arguments", ""),
                "no_tool": self.values.get("no_tool") in ("on", "true", "1", True),
            }
        mine = self.mine
        if mine is None:
            return {"note": "", "expected_tool": "", "expected_arguments": "", "no_tool": False}
        return {
            "note": mine.note,
            "expected_tool": mine.expected_tool,
            "expected_arguments": mine.expected_arguments,
            "no_tool": mine.expects_no_tool,
        }


def offered_tools(call: ToolCall) -> list[str]:
    """The names of the tools offered to the model in the request that made `call` (those of
    every request of its run when that one was not recorded), and the call's own."""
    offers = {
        model_call.step: wire.offered_tools(model_call.request)
        for model_call in ModelCall.objects.filter(run_id=call.run_id).defer("raw_stream_zlib")
    }
    chosen = [offers[call.step]] if offers.get(call.step) else list(offers.values())
    names = {call.name, *(name for offered in chosen for name in offered)}
    return sorted(names)


def _annotated(request: AuthenticatedRequest, pk: int) -> Conversation:
    """A conversation the user may annotate (`chat.access`: a shared one too); else 404."""
    return access.conversation(request.user, access.Action.ANNOTATE, pk)


@login_required
@require_http_methods(["GET", "POST"])
def reply_annotation(request: AuthenticatedRequest, pk: int, run_pk: int) -> HttpResponse:
    """A reply's annotation block (GET), or the reader's mark saved, changed or cleared."""
    run = get_object_or_404(_annotated(request, pk).runs, pk=run_pk)
    return _annotate(request, run, None)


@login_required
@require_http_methods(["GET", "POST"])
def tool_call_annotation(request: AuthenticatedRequest, pk: int, tool_call_pk: int) -> HttpResponse:
    """A tool call's annotation block (GET), or the reader's mark saved, changed or cleared."""
    call = get_object_or_404(
        ToolCall.objects.select_related("run"),
        pk=tool_call_pk,
        run__conversation=_annotated(request, pk),
    )
    return _annotate(request, call.run, call)


@dataclass(frozen=True)
class Outcome:
    """What a POST did: the problem that refused it (and its field), or what to announce."""

    status: int = 200
    error: str = ""
    field: str = ""
    announce: str = ""


def _annotate(request: AuthenticatedRequest, run: Run, call: ToolCall | None) -> HttpResponse:
    judged = Judgements(run, call, [], request.user.pk)
    outcome = Outcome()
    if request.method == "POST":
        outcome = _save(request, run, call)
        if not request.htmx:
            if outcome.error:
                messages.error(request, outcome.error)
            page = reverse("chat:conversation_detail", args=[run.conversation_id])
            return redirect(f"{page}#reply-{run.pk}")
        judged.error, judged.error_field = outcome.error, outcome.field
        if outcome.error or request.POST.get("action") == "clear":
            # Refused or cleared, the text typed stays in the form.
            judged.values = {name: request.POST.get(name, "") for name in FIELDS}
    judged.annotations = list(
        Annotation.objects.filter(run=run, tool_call=call).select_related("author")
    )
    if call is not None:
        judged.offered = offered_tools(call)
    html = render_to_string(f"{TEMPLATE}#block", {"j": judged}, request)
    if call is not None:
        html += render_to_string(f"{TEMPLATE}#call-mark", {"j": judged, "oob": True})
    if outcome.announce:
        html += render_to_string(
            "chat/conversation.html#announce", {"announce": outcome.announce, "oob": True}
        )
    return HttpResponse(html, status=outcome.status)


def _save(request: AuthenticatedRequest, run: Run, call: ToolCall | None) -> Outcome:
    """The reader's annotation saved, changed or cleared, or why not.

    The clicked Good or Bad button sends `verdict`; Save sends the reader's current one, if
    any. Without a mark, an expected call implies one (`implied_verdict`) and a note stays a
    note; saving nothing at all takes back what the reader had said.
    """
    target = "tool call" if call is not None else "reply"
    if run.is_active:
        return Outcome(409, STILL_RUNNING)
    mine = Annotation.objects.filter(author=request.user, run=run, tool_call=call)
    if request.POST.get("action") == "clear":
        mine.delete()
        return Outcome(announce=f"Your mark on this {target} is cleared.")
    data = QueryDict(mutable=True)
    data.update(request.POST)
    if not data.get("verdict"):
        data["verdict"] = request.POST.get("current", "")
    form = AnnotationForm(data, call=call)
    if not form.is_valid():
        return Outcome(422, form.error_line, form.error_field)
    verdict, expected = form.cleaned_data["verdict"], form.cleaned_data["expected"]
    note = form.cleaned_data["note"].replace("\r\n", "\n")
    if not verdict and expected is not None and call is not None:
        verdict = implied_verdict(expected, call)
    if not (verdict or note.strip() or expected):
        if mine.delete()[0]:
            return Outcome(announce=f"Your mark on this {target} is cleared.")
        return Outcome(422, NOTHING, "note")
    Annotation.objects.update_or_create(
        author=request.user,
        run=run,
        tool_call=call,
        defaults={"verdict": verdict, "note": note, "expected": expected},
    )
    if not verdict:
        return Outcome(announce=f"Your note on this {target} is saved.")
    return Outcome(announce=f"You marked this {target} {Verdict(verdict).label.lower()}.")
