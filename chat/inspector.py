"""The wire inspector: what went over the wire for each loop step of a run, and a run's own
page (read-only), where "Inspect" on an evaluation's attempt leads."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.safestring import SafeString

from chat import access, waterfall
from chat.agent.redaction import redact
from chat.agent.wire import offered_tools
from chat.models import Conversation, EvalResult, ModelCall, Purpose, Run, ToolCall
from chat.runs.providers import endpoint, known_keys

MAX_RAW_ROWS = 2000
DATA_URL_SHOWN = 80
_DATA_URL = re.compile(r"data:[\w.+-]*/?[\w.+-]*(;[\w.+=-]+)*;base64,", re.IGNORECASE)


@dataclass(frozen=True)
class Offer:
    """A tool the step's request offered, and whether the model called it in that step."""

    name: str
    called: bool


@dataclass(frozen=True)
class Called:
    """A tool call of the step, and whether its name was among the tools offered."""

    call: ToolCall
    offered: bool


@dataclass
class Step:
    number: int
    model_call: ModelCall | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)

    @property
    def offered(self) -> list[Offer]:
        """The tools the request offered; none when there is no request to read them from."""
        if self.model_call is None:
            return []
        names = {call.name for call in self.tool_calls}
        return [Offer(name, name in names) for name in offered_tools(self.model_call.request)]

    @property
    def calls(self) -> list[Called]:
        """The step's tool calls; without a request, each counts as offered (nothing to say)."""
        if self.model_call is None:
            return [Called(call, True) for call in self.tool_calls]
        offered = set(offered_tools(self.model_call.request))
        return [Called(call, call.name in offered) for call in self.tool_calls]

    @property
    def unoffered(self) -> list[str]:
        """Names the model called that its request did not offer, once each."""
        return list(dict.fromkeys(c.call.name for c in self.calls if not c.offered))

    @cached_property
    def request_json(self) -> str:
        """The request as Copy JSON takes it: whole, keys redacted."""
        if self.model_call is None:
            return ""
        return json.dumps(
            redact(self.model_call.request, self.secrets), indent=2, ensure_ascii=False
        )

    @cached_property
    def request_shown(self) -> str:
        """The request as the page shows it: each data URL (an attached image) cut short."""
        if self.model_call is None:
            return ""
        shown = shortened(redact(self.model_call.request, self.secrets))
        return json.dumps(shown, indent=2, ensure_ascii=False)

    @property
    def request_cut(self) -> bool:
        return self.request_shown != self.request_json

    @property
    def curl(self) -> str:
        """The request as a curl command; the key stays an environment variable."""
        call = self.model_call
        if call is None or not call.url.startswith("http"):
            return ""
        body = json.dumps(redact(call.request, self.secrets), ensure_ascii=False)
        return (
            f"curl -N {shlex.quote(call.url)} \\\n"
            f'  -H "Authorization: Bearer ${key_variable(call)}" \\\n'
            '  -H "Content-Type: application/json" \\\n'
            f"  -d {shlex.quote(body)}"
        )

    @cached_property
    def raw_lines(self) -> list[tuple[str, str]]:
        return self.model_call.raw_chunks() if self.model_call else []

    @property
    def raw(self) -> list[tuple[str, str]]:
        return self.raw_lines[:MAX_RAW_ROWS]

    @property
    def raw_count(self) -> int:
        return len(self.raw_lines)

    @property
    def raw_cut(self) -> bool:
        return self.raw_count > MAX_RAW_ROWS


def shortened(value: Any) -> Any:
    """`value` with every data URL longer than DATA_URL_SHOWN characters cut to its start and
    its length: "data:image/png;base64,iVBOR… (12,345 characters)"."""
    if isinstance(value, dict):
        return {key: shortened(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shortened(item) for item in value]
    if isinstance(value, str) and len(value) > DATA_URL_SHOWN and _DATA_URL.match(value):
        head = value[: value.index(",") + 6]
        return f"{head}… ({len(value):,} characters)"
    return value


def key_variable(call: ModelCall) -> str:
    """The variable the request's key comes from; a curl command names it, never its value."""
    return endpoint(call.run.conversation.profile).key_variable or "OPENAI_API_KEY"


def steps(run: Run) -> list[Step]:
    """One entry per loop step, in order, with its model call and its tool calls."""
    model_calls = {
        call.step: call
        for call in run.model_calls.select_related("run__conversation__profile").order_by("step")
    }
    secrets = known_keys()
    found = {number: Step(number, call, secrets=secrets) for number, call in model_calls.items()}
    for tool_call in run.tool_calls.order_by("step", "position", "pk"):
        step = found.setdefault(tool_call.step, Step(tool_call.step, None, secrets=secrets))
        step.tool_calls.append(tool_call)
    return [found[number] for number in sorted(found)]


def picture(run: Run, found: list[Step]) -> SafeString:
    """The run's waterfall, drawn from the rows its steps hold."""
    return waterfall.picture(
        run,
        [step.model_call for step in found if step.model_call is not None],
        [call for step in found for call in step.tool_calls],
        run.leases.all(),
    )


def max_steps(run: Run) -> Any:
    return (run.parameters or {}).get("max_event_loops", 8)


@login_required
def run_detail(request: HttpRequest, pk: int, run_pk: int) -> HttpResponse:
    """One run, read-only: its waterfall and steps; for an evaluation's replay, the attempt it
    made and the way back to its evaluation (a replay is no chat to write in)."""
    conversation = access.conversation(request.user, access.Action.READ, pk)
    run = get_object_or_404(conversation.runs, pk=run_pk)
    found = steps(run)
    attempt = EvalResult.objects.select_related("eval_run").filter(run=run).order_by("pk").first()
    context = {
        "conversation": conversation,
        "run": run,
        "attempt": attempt,
        "steps": found,
        "max_steps": max_steps(run),
        "waterfall": picture(run, found),
    }
    return render(request, "chat/run.html", context)


def replay_page(conversation: Conversation) -> str | None:
    """Where a replay's chat address leads: its run's page. None for a chat."""
    if conversation.purpose != Purpose.EVAL:
        return None
    run = conversation.runs.order_by("-started_at", "-pk").only("pk").first()
    return None if run is None else reverse("chat:run_detail", args=[conversation.pk, run.pk])
