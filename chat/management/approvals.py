"""Deciding tool calls that wait for a person, from a terminal: the chat command asks for each
call (or decides by its flags), `runs waiting` lists them and `runs decide` decides them from a
script. The decisions are `chat.runs.approvals`'; this module asks, prints and resumes."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, OutputWrapper
from django.utils import timezone

from chat import agent
from chat.agent.clients import ChatClient
from chat.management.terminal import RunPrinter, fold, plain, plural, retry_progress
from chat.models import Run, ToolCall
from chat.runs import approvals, mcp, resume
from chat.templatetags.chat_tags import pretty

NO_TERMINAL = "no one at the terminal to approve it"
QUESTION = "approve? [y]es / [n]o / [e]dit / [a]lways: "
ANSWERS = {
    "y": "approve",
    "yes": "approve",
    "n": "deny",
    "no": "deny",
    "e": "edit",
    "edit": "edit",
    "a": "always",
    "always": "always",
}
DONE = {
    "approve": "approved",
    "always": "approved (always allowed in this conversation)",
    "edit": "approved with your arguments",
    "deny": "denied",
}


def waiting_runs() -> list[dict[str, Any]]:
    """Every run that waits for a decision, oldest first, with its waiting calls (JSON-ready)."""
    rows = list(
        Run.objects.waiting().select_related("conversation__owner").order_by("waiting_until", "pk")
    )
    calls = approvals.waiting_calls(rows)
    listed = []
    for run in rows:
        asked = [call.asked_at for call in calls[run.pk] if call.asked_at is not None]
        listed.append(
            {
                "run": run.pk,
                "conversation": {"id": run.conversation_id, "title": run.conversation.title},
                "owner": run.conversation.owner.get_username(),
                "since": min(asked).isoformat() if asked else None,
                "expires": run.waiting_until.isoformat() if run.waiting_until else None,
                "tool_calls": [
                    {
                        "id": call.call_id,
                        "pk": call.pk,
                        "name": call.name,
                        "server": call.server or None,
                        "arguments": call.arguments,
                    }
                    for call in calls[run.pk]
                ],
            }
        )
    return listed


def waiting_lines(listed: list[dict[str, Any]]) -> list[str]:
    """`waiting_runs()` for a person: a line per run, an indented line per call."""
    if not listed:
        return ["No run waits for a decision."]
    lines = []
    for run in listed:
        title = run["conversation"]["title"] or "Untitled"
        lines.append(
            f"run {run['run']} · conversation {run['conversation']['id']} “{title}” · "
            f"owner {run['owner']} · waiting since {_when(run['since'])} · "
            f"expires {_when(run['expires'])}"
        )
        for call in run["tool_calls"]:
            where = call["server"] or "built-in"
            lines.append(
                f"  call {call['pk']} ({call['id']})  {call['name']} · {where}  "
                f"{fold(call['arguments'] or '{}', 120)}"
            )
    lines.append(
        f"{plural(len(listed), 'run')} waiting; decide with: manage.py runs decide RUN "
        "--approve | --deny [--reason TEXT] [--call CALL]"
    )
    return lines


def _when(text: str | None) -> str:
    if text is None:
        return "?"
    moment = timezone.localtime(datetime.fromisoformat(text))
    return moment.strftime("%Y-%m-%d %H:%M")


def call_named(run: Run, text: str) -> int:
    """The pk of the run's tool call `text` names: its pk, or the call id the model gave it."""
    rows = ToolCall.objects.filter(run=run)
    found = rows.filter(call_id=text).first()
    if found is None and text.isdigit():
        found = rows.filter(pk=int(text)).first()
    if found is None:
        raise CommandError(f"Run {run.pk} has no tool call {text!r}.")
    return found.pk


def decided_line(decided: approvals.Decided, verdict: str, user: Any) -> str:
    """One line saying what a decision did and what happens to the run next."""
    names = ", ".join(dict.fromkeys(call.name for call in decided.calls))
    line = (
        f"run {decided.run.pk}: {DONE[verdict]} {plural(len(decided.calls), 'call')} "
        f"({names}) as {user.get_username()}"
    )
    if decided.resumable:
        return f"{line}; the run goes on."
    left = decided.run.tool_calls.waiting().count()
    return f"{line}; {plural(left, 'call')} still {'waits' if left == 1 else 'wait'}."


def resume_here(
    run: Run, *, client: ChatClient | None = None, printer: RunPrinter | None = None
) -> Run | None:
    """Resume a decided run in this process and wait for its end (or its next wait); None when
    another process claimed it first."""

    async def go() -> Run | None:
        listeners = [printer] if printer is not None else []
        try:
            task = await resume.claim_and_resume(run, client=client, listeners=listeners)
            return None if task is None else await task
        finally:
            await mcp.hub.close()  # this event loop's MCP connections end with it

    run.refresh_from_db()  # a claim names the worker and lease the decision left
    with retry_progress(printer):
        resumed = asyncio.run(go())
    if resumed is not None:
        resumed.refresh_from_db()
    return resumed


@dataclass
class Approver:
    """The chat command's decisions on a waiting run: the calls of the `approved` tools (all of
    them with `everything`) approved at once, the others asked for at the terminal when there
    is one (`interactive`), else denied."""

    user: Any
    out: OutputWrapper
    approved: Collection[str] = ()
    everything: bool = False
    interactive: bool = False
    read: Callable[[], str] = lambda: builtins.input()

    def decide(self, run: Run) -> bool:
        """Decide each waiting call of `run`; True once the run goes on."""
        goes_on = False
        calls = approvals.waiting_calls([run])[run.pk]
        for call in calls:
            call.refresh_from_db()
            if not call.is_waiting:  # always allowed with an earlier call of its tool
                continue
            goes_on = self._one(run, call) or goes_on
        return goes_on

    def _one(self, run: Run, call: ToolCall) -> bool:
        label = f"{agent.humanize(call.name)} ({call.name} · {call.server or 'built-in'})"
        if self.everything or call.name in self.approved:
            flag = "--approve-all" if self.everything else f"--approve {call.name}"
            return self._take(run, call, "approve", note=f"{label}: approved by {flag}")
        if not self.interactive:
            return self._take(
                run,
                call,
                "deny",
                reason=NO_TERMINAL,
                note=f"{label}: denied, {NO_TERMINAL} (--approve {call.name} or --approve-all "
                "allow it)",
            )
        self._write(f"{label} waits for your approval, with the arguments:\n")
        self._write(pretty(call.arguments or "{}") + "\n")
        while True:
            answer = self._ask(QUESTION)
            if answer is None:
                return self._take(run, call, "deny", reason=NO_TERMINAL)
            verdict = ANSWERS.get(answer.strip().lower())
            if verdict is None:
                self._write("Answer y (approve), n (deny), e (edit) or a (always allow).\n")
            elif verdict == "deny":
                reason = self._ask("reason (optional, the model reads it): ") or ""
                return self._take(run, call, "deny", reason=reason)
            elif verdict != "edit":
                return self._take(run, call, verdict)
            elif (edited := self._edit(run, call)) is not None:
                return edited

    def _edit(self, run: Run, call: ToolCall) -> bool | None:
        """Read new arguments until they are accepted; None to go back to the question."""
        while True:
            text = self._ask("arguments (one line of JSON; empty to go back): ")
            if not text or not text.strip():
                return None
            try:
                decided = approvals.decide(self.user, run.pk, "edit", call=call.pk, arguments=text)
            except approvals.DecisionRefused as exc:
                self._write(f"{exc}\n")
                continue
            self._write(f"✓ {DONE['edit']}\n")
            return decided.resumable

    def _take(
        self, run: Run, call: ToolCall, verdict: str, *, reason: str = "", note: str = ""
    ) -> bool:
        """Decide `call`; a refusal (decided meanwhile in the web, expired) is said, not raised."""
        try:
            decided = approvals.decide(self.user, run.pk, verdict, call=call.pk, reason=reason)
        except approvals.DecisionRefused as exc:
            self._write(f"{exc}\n")
            return False
        mark = "✗" if verdict == "deny" else "✓"
        self._write(f"{mark} {note or DONE[verdict]}\n")
        return decided.resumable

    def _ask(self, prompt: str) -> str | None:
        """One line typed at the terminal; None when it closed (end of input)."""
        self._write(prompt)
        try:
            return self.read()
        except EOFError:
            self._write("\n")
            self.interactive = False  # the calls after this one are denied without asking
            return None

    def _write(self, text: str) -> None:
        self.out.write(text, style_func=plain, ending="")
        self.out.flush()


def claim_note() -> str:
    return (
        f"a running server resumes it within {settings.AGENTLAB_CLAIM_SECONDS:g} seconds "
        "(AGENTLAB_CLAIM_SECONDS)"
    )
