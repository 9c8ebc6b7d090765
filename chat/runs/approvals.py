"""Tool calls that wait for a person (the policies are `chat.agent.approvals`).

A run whose turn calls a tool that asks first ends its task `requires_action` (the recorder
writes it): no process holds it, nothing streams. Each decision is stored on its call: who,
when, approve / deny / edit, the arguments before and after, the reason. Once the run's last
waiting call is decided, the run is in progress again with no process holding it: the deciding
process claims it at once (any other's sweeper would), and it resumes from its transcript, the
approved calls running and the denied ones answered "The user denied this call: …".

Every function asks the rule (`chat.access`, DECIDE) and refuses with DecisionRefused, one
line for the person, having changed nothing.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.formats import date_format

from chat import access
from chat.agent import AgentParameters, default_registry
from chat.agent.approvals import Policy, default_policy, tightened
from chat.agent.tools import ToolError, parse_arguments
from chat.models import Approval, Conversation, McpTool, Message, Run, RunStatus, ToolCall

from . import liveness
from .steps import fit

VERDICTS = {
    "approve": Approval.APPROVED,
    "always": Approval.ALWAYS,
    "edit": Approval.EDITED,
    "deny": Approval.DENIED,
}
"""A decision as frames, forms and commands name it, and what it records."""
APPROVED = (Approval.APPROVED, Approval.ALWAYS, Approval.EDITED)
NOT_WAITING = "There is no tool call waiting for a decision here."


class DecisionRefused(Exception):
    """A decision that cannot be taken; its text says why, in one line."""


@dataclass
class Decided:
    """What a decision changed: the calls it decided and, once none waits any more, that the
    run goes on (`resumable`)."""

    run: Run
    calls: list[ToolCall] = field(default_factory=list)
    resumable: bool = False


def timeout_text() -> str:
    seconds = int(settings.AGENTLAB_APPROVAL_TIMEOUT)
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def expired_reason() -> str:
    return f"no decision within {timeout_text()} (AGENTLAB_APPROVAL_TIMEOUT)"


def no_longer_waiting(call: ToolCall) -> str:
    """Why `call` cannot be decided now, in one line."""
    who = f" by {call.decided_by.get_username()}" if call.decided_by else ""
    when = (
        f" at {date_format(timezone.localtime(call.decided_at), 'H:i')}" if call.decided_at else ""
    )
    match call.approval:
        case Approval.APPROVED | Approval.ALWAYS | Approval.EDITED:
            return f"This call was already approved{who}{when}: it is no longer waiting."
        case Approval.DENIED:
            return f"This call was already denied{who}{when}: it is no longer waiting."
        case Approval.EXPIRED:
            return f"This call is no longer waiting: it expired ({expired_reason()})."
        case Approval.STOPPED:
            return "This call is no longer waiting: the run was stopped."
    return "This call does not wait for a decision."


def default_policies(names: Collection[str]) -> dict[str, Policy]:
    """Each named tool's default as this server knows the tool: run when it declares that it
    only reads (a built-in's flag, an MCP server's readOnlyHint), else ask."""
    found: dict[str, Policy] = {}
    for name in names:
        tool = default_registry.get(name)
        if tool is not None:
            found[name] = default_policy(tool.read_only)
    rows = McpTool.objects.filter(exposed_name__in=[n for n in names if n not in found])
    for row in rows.only("exposed_name", "annotations"):
        found[row.exposed_name] = default_policy(row.read_only)
    return {name: found.get(name, "ask") for name in names}


def for_run(conversation: Conversation, parameters: AgentParameters) -> AgentParameters:
    """The parameters a new run of `conversation` follows: its tool policies made at least as
    strict as those of the agent version it started from, and the tools its owner always
    allowed here running without asking (unless never to run)."""
    version = conversation.agent_version
    floor = version.agent_parameters().tool_policies if version is not None else {}
    own, granted = parameters.tool_policies, list(conversation.always_allowed or [])
    if not floor and not granted:
        return parameters
    defaults = default_policies({*own, *floor, *granted})
    policies = tightened(own, floor, defaults, granted)
    return parameters.model_copy(update={"tool_policies": policies})


def tool_schema(name: str) -> dict[str, Any] | None:
    """The arguments schema of a tool as this server knows it (built in, a tool module's, an
    MCP server's as last listed); None when it knows no such tool."""
    tool = default_registry.get(name)
    if tool is not None:
        return tool.definition.parameters
    row = McpTool.objects.filter(exposed_name=name).first()
    if row is not None:
        return row.input_schema or {"type": "object"}
    return None


def checked_arguments(name: str, text: str) -> str:
    """Edited arguments as they will run: a JSON object that fits the tool's schema."""
    from chat.transcripts.limits import ARGUMENT_CHARS, JsonRefused, load_json

    try:
        value = load_json(text, max_chars=ARGUMENT_CHARS)
    except JsonRefused as exc:
        raise DecisionRefused(f"The arguments are not valid JSON: {exc}.") from None
    if not isinstance(value, dict):
        raise DecisionRefused('The arguments must be a JSON object, such as {"query": "…"}.')
    schema = tool_schema(name)
    if schema is None:
        raise DecisionRefused(
            f"The tool {name} is not known here, so edited arguments cannot be checked: "
            "approve or deny the call as it is."
        )
    edited = json.dumps(value, ensure_ascii=False)
    try:
        parse_arguments(edited, schema)
    except ToolError as exc:
        detail = str(exc).removeprefix("invalid arguments").removeprefix(":").strip()
        joined = f" {detail}" if detail.startswith("at ") else f": {detail}"
        raise DecisionRefused(
            f"The arguments do not fit the tool's schema{joined.rstrip('.')}."
        ) from None
    return edited


@transaction.atomic
def decide(
    user: Any,
    run_id: int,
    verdict: str,
    *,
    call: int | None = None,
    arguments: str | None = None,
    reason: str = "",
) -> Decided:
    """Decide one waiting call of a run (`call`, a ToolCall's id) or, without, every one of
    them at once. `verdict` is one of VERDICTS; `edit` takes `arguments` (JSON text) for one
    call; `deny` takes an optional `reason` the model reads."""
    approval = VERDICTS.get(verdict)
    if approval is None:
        raise DecisionRefused(f"Unknown decision {verdict[:40]!r}: use {', '.join(VERDICTS)}.")
    run = _waiting_run(user, run_id)
    rows = run.tool_calls.select_related("decided_by").filter(message__isnull=False)
    if call is not None:
        rows = rows.filter(pk=call)
        target = rows.first()
        if target is None:
            raise DecisionRefused(NOT_WAITING)
        if not target.is_waiting:
            raise DecisionRefused(no_longer_waiting(target))
    calls = list(rows.filter(approval=Approval.WAITING))
    if not calls:
        raise DecisionRefused(NOT_WAITING)
    changes: dict[str, Any] = {"decision_reason": reason.strip()[:2000]}
    if approval == Approval.EDITED:
        if len(calls) != 1 or arguments is None:
            raise DecisionRefused("Edit one call at a time, with its new arguments.")
        changes["edited_arguments"] = checked_arguments(calls[0].name, arguments)
    elif approval != Approval.DENIED:
        changes["decision_reason"] = ""
    if approval == Approval.ALWAYS:
        names = {row.name for row in calls}
        calls = list(run.tool_calls.filter(approval=Approval.WAITING, name__in=names))
        _always_allow(run, names)
    decided = Decided(run)
    for row in calls:
        decided.calls.append(_record(row, user, approval, changes))
    decided.resumable = _go_on_if_decided(run)
    return decided


@transaction.atomic
def ask(
    run: Run, message: Message | None, waiting: Mapping[str, str], finished: Collection[str]
) -> dict[str, dict[str, Any]]:
    """A round of `message`'s calls waits for a person: the `waiting` calls (call id → the MCP
    server of its tool, "" built in) marked so, and none of its calls but the `finished`
    counted as started (once decided, the resumer runs them knowing they never ran). The
    fields written, by call id."""
    now = timezone.now()
    rows = ToolCall.objects.filter(run=run, message=message)
    rows.exclude(call_id__in=list(finished)).update(started_at=None)
    asked = {}
    for call_id, server in waiting.items():
        asked[call_id] = {
            "approval": Approval.WAITING,
            "asked_at": now,
            "policy": "ask",
            "server": fit(ToolCall, "server", server),
        }
        rows.filter(call_id=call_id).update(**asked[call_id])
    return asked


def expire(run: Run) -> Decided | None:
    """Deny every call of a waiting run past its AGENTLAB_APPROVAL_TIMEOUT; None when it no
    longer waits."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().filter(pk=run.pk).waiting().first()
        if locked is None or locked.waiting_until is None or locked.waiting_until > timezone.now():
            return None
        decided = Decided(locked)
        changes = {"decision_reason": expired_reason()}
        for row in locked.tool_calls.filter(approval=Approval.WAITING):
            decided.calls.append(_record(row, None, Approval.EXPIRED, changes))
        decided.resumable = _go_on_if_decided(locked)
        return decided


def due() -> QuerySet[Run]:
    """Waiting runs past their AGENTLAB_APPROVAL_TIMEOUT."""
    return Run.objects.waiting().filter(waiting_until__lt=timezone.now())


@transaction.atomic
def stop(user: Any, conversation: Conversation) -> Run | None:
    """Stop the run that waits in `conversation` (Stop, like any run): its waiting calls are
    recorded as stopped, and it ends cancelled; None when no run waits there."""
    if refused := access.denied(user, access.Action.WRITE, conversation):
        raise DecisionRefused(refused)
    run = conversation.runs.select_for_update().waiting().first()
    if run is None:
        return None
    run.tool_calls.filter(approval=Approval.WAITING).update(
        approval=Approval.STOPPED, decided_at=timezone.now(), decided_by=user
    )
    if not liveness.end(run, RunStatus.CANCELLED, liveness.CANCELLED):
        return None
    return run


def waiting_calls(runs: Sequence[Run]) -> dict[int, list[ToolCall]]:
    """The waiting calls of each run, in the order the model asked for them."""
    found: dict[int, list[ToolCall]] = {run.pk: [] for run in runs}
    rows = ToolCall.objects.waiting().filter(run__in=list(found)).order_by("step", "position")
    for row in rows:
        found[row.run_id].append(row)
    return found


def _waiting_run(user: Any, run_id: int) -> Run:
    run = (
        Run.objects.select_for_update()
        .select_related("conversation")
        .filter(pk=run_id, conversation__in=access.conversations(user, access.Action.READ))
        .first()
    )
    if run is None:
        raise DecisionRefused(NOT_WAITING)
    if refused := access.denied(user, access.Action.DECIDE, run.conversation):
        raise DecisionRefused(refused)
    return run


def _record(row: ToolCall, user: Any, approval: str, changes: dict[str, Any]) -> ToolCall:
    """Store one decision; the call must still wait (two tabs deciding at once: one wins)."""
    fields = {"approval": approval, "decided_at": timezone.now(), "decided_by": user, **changes}
    if not ToolCall.objects.filter(pk=row.pk, approval=Approval.WAITING).update(**fields):
        row.refresh_from_db()
        raise DecisionRefused(no_longer_waiting(row))
    for name, value in fields.items():
        setattr(row, name, value)
    if approval == Approval.EDITED:
        _edit_message(row)
    return row


def _edit_message(row: ToolCall) -> None:
    """The model's turn now carries the arguments the call runs with: the history the model
    reads next pairs the call with its result (the record keeps the model's own)."""
    if row.message_id is None:
        return
    message = Message.objects.select_for_update().get(pk=row.message_id)
    calls = [dict(entry) for entry in message.tool_calls or []]
    for entry in calls:
        if entry.get("id") == row.call_id:
            entry["function"] = {**entry.get("function", {}), "arguments": row.edited_arguments}
    message.tool_calls = calls
    message.save(update_fields=["tool_calls"])


def _always_allow(run: Run, names: set[str]) -> None:
    """The conversation's owner lets these tools run without asking from now on: in this
    conversation, and for the rest of this run."""
    conversation = Conversation.objects.select_for_update().get(pk=run.conversation_id)
    allowed = list(dict.fromkeys([*(conversation.always_allowed or []), *sorted(names)]))
    conversation.always_allowed = allowed
    conversation.save(update_fields=["always_allowed"])
    policies = dict(run.parameters.get("tool_policies") or {})
    policies.update({name: "run" for name in names if policies.get(name) != "never"})
    run.parameters = {**run.parameters, "tool_policies": policies}
    run.save(update_fields=["parameters"])


def _go_on_if_decided(run: Run) -> bool:
    """Once no call of the run waits, put it back in progress with no process holding it, so
    that a process claims and resumes it; True when this decision was the last."""
    if run.tool_calls.filter(approval=Approval.WAITING).exists():
        return False
    changes = {
        "status": RunStatus.IN_PROGRESS,
        "worker": "",
        "lease_expires_at": timezone.now(),
        "waiting_until": None,
    }
    if not Run.objects.waiting().filter(pk=run.id).update(**changes):
        return False
    for name, value in changes.items():
        setattr(run, name, value)
    return True
