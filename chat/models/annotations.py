"""Annotations: a team member's judgement of a reply or of one tool call it made."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from chat.agent.decisions import NO_TOOL

from .runs import Run, ToolCall


class Verdict(models.TextChoices):
    GOOD = "good", "Good"
    BAD = "bad", "Bad"


def expected_call(*, tool: str, arguments: str, no_tool: bool) -> dict[str, Any] | None:
    """The expected call from what a form says: `{"tool": name, "arguments": {...}}`,
    `{"no_tool": true}`, or None when nothing is said.

    Raises ValidationError with one line for the reader: arguments that are not a JSON object
    or that the bounded gate refuses (`chat.transcripts.limits`), arguments without a tool name,
    a tool name with "no tool should be called".
    """
    # Imported here: chat.transcripts imports these models.
    from chat.transcripts.limits import ARGUMENT_CHARS, JsonRefused, load_json

    tool, arguments = tool.strip(), arguments.strip()
    if no_tool:
        if tool or arguments:
            raise ValidationError(
                "Either a tool call or “No tool should be called”, not both.", code="both"
            )
        return dict(NO_TOOL)
    if not tool:
        if arguments:
            raise ValidationError("Name the expected tool for these arguments.", code="no_tool")
        return None
    try:
        value = load_json(arguments, max_chars=ARGUMENT_CHARS) if arguments else {}
    except JsonRefused as exc:
        if (where := exc.decoding) is None:
            raise ValidationError(
                "Expected arguments: %(error)s.", code="json", params={"error": exc.reason}
            ) from None
        raise ValidationError(
            "Expected arguments are not valid JSON: %(error)s at line %(line)s, column %(column)s.",
            code="json",
            params={"error": where.msg.lower(), "line": where.lineno, "column": where.colno},
        ) from None
    if not isinstance(value, dict):
        raise ValidationError(
            'Expected arguments must be a JSON object, like {"timezone": "UTC"}.',
            code="not_object",
        )
    return {"tool": tool, "arguments": value}


EXPECTED_FIELDS = {
    "json": "expected_arguments",
    "not_object": "expected_arguments",
    "both": "no_tool",
}
"""Which field of an annotation form (the chat's, the admin's) an `expected_call` problem is
about, by its code; any other is about the tool's name, `expected_tool`."""


def expected_field(problem: ValidationError) -> str:
    return EXPECTED_FIELDS.get(problem.code or "", "expected_tool")


def validate_expected(value: Any) -> None:
    """A stored expected call has one of the two shapes `expected_call` makes."""
    if value is None or value == NO_TOOL:
        return
    if (
        isinstance(value, dict)
        and set(value) == {"tool", "arguments"}
        and isinstance(value["tool"], str)
        and value["tool"].strip()
        and isinstance(value["arguments"], dict)
    ):
        return
    raise ValidationError(
        'An expected call is {"tool": name, "arguments": {...}} or {"no_tool": true}.',
        code="shape",
    )


class AnnotationQuerySet(models.QuerySet["Annotation"]):
    def readable_by(self, user: Any) -> AnnotationQuerySet:
        """Annotations on the conversations `user` may read (`Conversation.readable_by`)."""
        from .conversations import Conversation

        readable = Conversation.objects.readable_by(user).values("pk")
        return self.filter(run__conversation__in=readable)

    def on_replies(self) -> AnnotationQuerySet:
        return self.filter(tool_call__isnull=True)

    def on_tool_calls(self) -> AnnotationQuerySet:
        return self.filter(tool_call__isnull=False)


class Annotation(models.Model):
    """A team member's Good or Bad on a reply (its run) or on one of its tool calls, with a
    note and, for a tool call, the call they expected. The verdict is empty for a note saved
    without a mark. One per author and target: marking again updates it."""

    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="annotations"
    )
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="annotations", help_text="The reply judged."
    )
    tool_call = models.ForeignKey(
        ToolCall,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="annotations",
        help_text="Set when the judgement is of one tool call of the reply.",
    )
    verdict = models.CharField(max_length=10, choices=Verdict.choices)
    note = models.TextField(blank=True)
    expected = models.JSONField(
        null=True,
        blank=True,
        validators=[validate_expected],
        help_text='Tool calls only: {"tool": name, "arguments": {...}} or {"no_tool": true}.',
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = AnnotationQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            # Two partial constraints: a NULL tool_call never collides in a plain unique one.
            models.UniqueConstraint(
                fields=["author", "run"],
                condition=Q(tool_call__isnull=True),
                name="one_annotation_per_author_and_reply",
                violation_error_message="You have already annotated this reply.",
            ),
            models.UniqueConstraint(
                fields=["author", "tool_call"],
                condition=Q(tool_call__isnull=False),
                name="one_annotation_per_author_and_tool_call",
                violation_error_message="You have already annotated this tool call.",
            ),
            models.CheckConstraint(
                condition=Q(tool_call__isnull=False) | Q(expected__isnull=True),
                name="expected_call_only_on_tool_calls",
                violation_error_message="Only a tool call has an expected call.",
            ),
        ]

    def __str__(self) -> str:
        target = f"tool call {self.tool_call_id}" if self.tool_call_id else f"run {self.run_id}"
        return f"{self.get_verdict_display() or 'Note'} on {target}"

    def clean(self) -> None:
        if (
            self.tool_call_id is not None
            and self.run_id is not None
            and not ToolCall.objects.filter(pk=self.tool_call_id, run_id=self.run_id).exists()
        ):
            raise ValidationError({"tool_call": "This tool call belongs to another run."})
        if self.tool_call_id is None and self.expected is not None:
            raise ValidationError("Only a tool call has an expected call.", code="expected")

    @property
    def is_good(self) -> bool:
        return self.verdict == Verdict.GOOD

    @property
    def expects_no_tool(self) -> bool:
        return self.expected == NO_TOOL

    @property
    def expected_tool(self) -> str:
        if isinstance(self.expected, dict) and isinstance(self.expected.get("tool"), str):
            return str(self.expected["tool"])
        return ""

    @property
    def expected_arguments(self) -> str:
        """The expected arguments as compact JSON text (empty when no call is expected)."""
        if not self.expected_tool or not isinstance(self.expected, dict):
            return ""
        return json.dumps(self.expected.get("arguments", {}), ensure_ascii=False)
