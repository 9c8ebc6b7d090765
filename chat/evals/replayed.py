"""What an attempt replays: a case's history, parameters and tools, or, for an agent version,
the case's history after its system prompts and pre-messages with the version's own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from chat import agent
from chat.agent.contracts import validation_text
from chat.evals import cases
from chat.models import AgentVersion, Case
from chat.runs import RunRefused
from chat.transcripts.limits import refusal_text
from chat.transcripts.messages import OpenAIMessages


def replayed(
    case: Case, version: AgentVersion | None
) -> tuple[tuple[agent.ChatMessage, ...], dict[str, Any], list[dict[str, Any]]]:
    """The history, parameters and tools an attempt replays: the case's own; with an agent
    version, the case's history after its system prompts and pre-messages, sent with the
    version's, its tools and its parameters (the expectation and fixtures stay the case's)."""
    history = case_history(case)
    if version is None:
        return history, dict(case.parameters), list(case.tools)
    own = version_parameters(version)
    return history[preamble(case, history) :], own.to_json(), cases.openai_tools(own.enabled_tools)


def version_parameters(version: AgentVersion) -> agent.AgentParameters:
    """A version's parameters; RunRefused when they no longer validate."""
    try:
        return version.agent_parameters()
    except ValueError as exc:
        raise RunRefused(f"The settings of {version} are invalid: {validation_text(exc)}") from None


def preamble(case: Case, history: Sequence[agent.ChatMessage]) -> int:
    """How many of a case's first messages are its system prompts and pre-messages; a case kept
    before it recorded that: its leading system messages."""
    if case.preamble is not None:
        return case.preamble
    return next((n for n, message in enumerate(history) if message.role != "system"), len(history))


class _History(BaseModel):
    messages: OpenAIMessages


def case_history(case: Case) -> tuple[agent.ChatMessage, ...]:
    """A case's messages, read by the one reader a transcript's go through
    (`chat.transcripts.messages`): text parts joined with a blank line, any other part refused,
    a user message's files as the stored values it names (the replay loads their contents).
    RunRefused with the reader's line for a case stored before that reader refused it."""
    try:
        read = _History.model_validate({"messages": case.messages})
    except ValidationError as exc:
        raise RunRefused(f"The case cannot be replayed: {refusal_text(exc)}") from None
    return tuple(message.value() for message in read.messages)
