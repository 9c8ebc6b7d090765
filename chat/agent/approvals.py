"""Which tool calls wait for a person: a policy per tool, and the replies a decision gives.

Each tool is *run* (executed at once), *ask* (the run waits until a person approves or denies
the call) or *never* (refused without asking). A tool that declares it only reads defaults to
run, any other to ask; a choice of the agent's or the conversation's overrides the default.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from .events import ToolResult
from .messages import ToolCall

Policy = Literal["run", "ask", "never"]
POLICIES: tuple[Policy, ...] = ("run", "ask", "never")
"""From the loosest to the strictest."""
POLICY_LABELS: dict[str, str] = {
    "run": "Run without asking",
    "ask": "Ask first",
    "never": "Never run",
}
DENIED = "The user denied this call"
NOT_ALLOWED = "This tool may not run here: its policy is never"


def default_policy(read_only: bool) -> Policy:
    return "run" if read_only else "ask"


def stricter(*policies: Policy) -> Policy:
    """The strictest of `policies` ("run" when there are none)."""
    return max(policies, key=POLICIES.index, default="run")


def looser(policy: str, than: str) -> bool:
    """Whether `policy` allows more than `than`."""
    return POLICIES.index(policy) < POLICIES.index(than)


def tightened(
    own: Mapping[str, Policy],
    floor: Mapping[str, Policy],
    default: Mapping[str, Policy],
    granted: Iterable[str] = (),
) -> dict[str, Policy]:
    """The policies a run follows: each tool's `own` policy (else its `default`, else run)
    made at least as strict as the `floor`'s; a tool `granted` (always allowed in this
    conversation by its owner) runs without asking unless it is never to run."""
    names = {*own, *floor, *granted}
    result: dict[str, Policy] = {}
    for name in sorted(names):
        base = default.get(name, "run")
        policy = stricter(own.get(name, base), floor.get(name, base))
        if name in granted and policy == "ask":
            policy = "run"
        result[name] = policy
    return result


def denial(call: ToolCall, reason: str = "") -> ToolResult:
    """The reply the model reads for a call a person denied (or left undecided too long)."""
    text = f"{DENIED}: {reason.strip()}" if reason.strip() else f"{DENIED}."
    return ToolResult(
        tool_call=call, content=text, status="failed", error=text, failure="denied", policy="ask"
    )


def not_allowed(call: ToolCall) -> ToolResult:
    """The reply to a call of a tool whose policy is never: refused without asking."""
    text = f"{NOT_ALLOWED}."
    return ToolResult(
        tool_call=call,
        content=text,
        status="failed",
        error=text,
        failure="not_allowed",
        policy="never",
    )
