"""A tool call's approval in words: whether it asked first, who decided what, when and after how
long, why, and the arguments before and after an edit. The pill details, the inspector, the
admin and the waterfall say it the same way."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone
from django.utils.formats import date_format

from chat.models import Approval, Policy, ToolCall
from chat.templatetags.chat_tags import pretty

ASKED = "Asked first"
DONE = {
    Approval.APPROVED: "approved",
    Approval.ALWAYS: "approved",
    Approval.EDITED: "edited and approved",
    Approval.DENIED: "denied",
    Approval.STOPPED: "stopped",
}
"""What a person's decision did, as a sentence says it."""


@dataclass(frozen=True)
class Record:
    """What the record says of one call: `kind` is its approval, or its policy when it did not
    ask; `before` and `after` are the arguments of an edited call, as readable JSON."""

    kind: str
    text: str
    before: str = ""
    after: str = ""


def span(seconds: float) -> str:
    """A wait as people say it: "40 s", "3 min", "2 h 5 min", "within a second"."""
    if seconds < 1:
        return "within a second"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest} min" if rest else f"{hours} h"


def waited(call: ToolCall, now: datetime | None = None) -> float | None:
    """Seconds the call waited for a person: until the decision, or until now while it waits;
    None when it did not ask."""
    if call.asked_at is None:
        return None
    end = call.decided_at or (now or timezone.now() if call.is_waiting else None)
    return None if end is None else max((end - call.asked_at).total_seconds(), 0.0)


def clock(moment: datetime) -> str:
    """ "14:02" today, "3 Dec 14:02" before."""
    local = timezone.localtime(moment)
    same_day = local.date() == timezone.localdate()
    return date_format(local, "H:i" if same_day else "j M H:i")


def decision(call: ToolCall) -> str:
    """The decision alone: "approved by ada at 14:02 after 3 min", "denied by ada at 14:02
    after 3 min: not before Friday", "expired: no decision within 24 hours"; empty when the
    call did not ask."""
    approval = call.approval
    if approval == Approval.WAITING:
        since = f" since {clock(call.asked_at)}" if call.asked_at else ""
        return f"waiting for approval{since}"
    if approval == Approval.EXPIRED:
        return f"expired: {call.decision_reason or 'no decision in time'}"
    if approval not in DONE:
        return ""
    text = DONE[Approval(approval)]
    if who := call.decider:
        text += f" by {who}"
    if call.decided_at is not None:
        text += f" at {clock(call.decided_at)}"
    took = waited(call)
    if took is not None and approval != Approval.STOPPED:
        text += f" after {span(took)}" if took >= 1 else f" {span(took)}"
    if approval == Approval.STOPPED:
        return f"{text} before a decision"
    if approval == Approval.ALWAYS:
        return f"{text}, and always allowed in this conversation"
    if approval == Approval.DENIED and call.decision_reason:
        return f"{text}: {call.decision_reason}"
    return text


def record(call: ToolCall) -> Record | None:
    """What to show of the call's approval; None for a call whose policy was not recorded (an
    evaluation's replay, or a call made before policies)."""
    if call.approval:
        said = decision(call)
        text = f"{ASKED} · {said}" if said else ASKED
        if call.approval == Approval.EDITED and call.edited_arguments:
            before, after = pretty(call.arguments) or "{}", pretty(call.edited_arguments)
            return Record(call.approval, text, before, after)
        return Record(call.approval, text)
    if call.policy == Policy.RUN:
        return Record(call.policy, "Ran without asking (policy: run)")
    if call.policy == Policy.NEVER:
        return Record(call.policy, "Never run (policy: never)")
    return None
