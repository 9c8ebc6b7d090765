"""Cases: a moment of a conversation kept with the tool decision expected there.

A case keeps its own copy of everything a replay needs (the history as sent, the tools offered,
the sampling parameters, the recorded tool results), so it survives its conversation's edits
and deletion, and travels as one JSON line (`records`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from chat import agent, transcripts
from chat.agent import decisions
from chat.agent.titles import clean_title
from chat.models import (
    NO_TOOL,
    Annotation,
    Case,
    CaseSet,
    CaseSource,
    Conversation,
    McpTool,
    Message,
    ModelCall,
    Run,
    ToolCall,
    ToolCallStatus,
    Verdict,
)
from chat.transcripts import inline
from chat.transcripts.limits import NOTE_CHARS, JsonRefused, storable

TITLE_CHARS = 80
SAMPLING = ("temperature", "top_p", "max_tokens", "max_event_loops")
"""The parameters a case keeps: how the model was asked, not what it was told (the system
prompts and pre-messages are already in the case's messages)."""


class CaseRefused(ValueError):
    """A case cannot be made as asked; the text says why, in one line."""


@dataclass(frozen=True)
class Moment:
    """Where a case starts: the active path up to message `index`, and the reply after it."""

    rows: list[Message]
    index: int
    reply: Message | None


def moment(conversation: Conversation, index: int) -> Moment:
    """The moment after message `index` of the conversation's shown path; CaseRefused saying
    why when no decision follows there (not a user or tool message, a round half answered)."""
    rows = list(conversation.messages.active())
    position = next((p for p, row in enumerate(rows) if row.index == index), None)
    if position is None:
        shown = f"{rows[0].index} to {rows[-1].index}" if rows else "none"
        raise CaseRefused(
            f"Conversation {conversation.pk} has no message {index} on its shown path "
            f"(its messages: {shown})."
        )
    row = rows[position]
    if row.role not in (Message.Role.USER, Message.Role.TOOL):
        article = "an" if row.role == Message.Role.ASSISTANT else "a"
        raise CaseRefused(
            f"Message {index} is {article} {row.role} message: a case starts at a user or a "
            "tool message, the moment before the model decides."
        )
    after = rows[position + 1] if position + 1 < len(rows) else None
    if row.role == Message.Role.TOOL and after is not None and after.role == Message.Role.TOOL:
        end = position
        while end + 1 < len(rows) and rows[end + 1].role == Message.Role.TOOL:
            end += 1
        last = rows[end].index
        raise CaseRefused(
            f"Message {index} answers one call of a round that goes on: take the round's last "
            f"tool message, {last}."
        )
    reply = after if after is not None and after.role == Message.Role.ASSISTANT else None
    return Moment(rows[: position + 1], index, reply)


def moment_of_reply(run: Run) -> int:
    """The moment a reply's first decision was made: the message before its first turn."""
    first = (
        run.messages.filter(role=Message.Role.ASSISTANT, version__isnull=True)
        .order_by("index")
        .first()
    )
    if first is None or first.index == 0:
        raise CaseRefused("This reply has no model turn on the shown path to keep as a case.")
    return first.index - 1


def moment_of_tool_call(call: ToolCall) -> int:
    """The moment a tool call was decided: the message before the turn that asked for it."""
    if call.message is None or call.message.version_id is not None or call.message.index == 0:
        raise CaseRefused("This tool call's turn is not on the shown path of its conversation.")
    return call.message.index - 1


def stored_decision(reply: Message | None) -> dict[str, Any]:
    """The expectation by default: what the stored reply called (its arguments as sent)."""
    if reply is None:
        return dict(NO_TOOL)
    message = transcripts.to_chat_message(reply)
    return decisions.expectation(
        (call.name, decisions.parse_arguments(call.arguments) or {}) for call in message.tool_calls
    )


def expectation_from_annotation(annotation: Annotation) -> dict[str, Any]:
    """What an annotation of a tool call says was expected: the reply's calls with this one
    replaced by the annotation's expected call (or left out, "no tool should be called").

    A Good mark keeps the stored calls; a Bad one without an expected call says nothing to
    replay, and is refused.
    """
    call = annotation.tool_call
    if call is None or call.message is None:
        raise CaseRefused("Only an annotation of a tool call says which call was expected.")
    stored = stored_decision(call.message)
    if annotation.expected is None:
        if annotation.verdict == Verdict.BAD:
            raise CaseRefused(
                "This call is marked Bad without the call expected instead: add the expected "
                "call (or “No tool should be called”) to the annotation first."
            )
        return stored
    others = [
        (c.name, decisions.parse_arguments(c.arguments) or {})
        for c in transcripts.to_chat_message(call.message).tool_calls
        if c.id != call.call_id
    ]
    if annotation.expects_no_tool:
        return decisions.expectation(others)
    return decisions.expectation(
        [*others, (annotation.expected_tool, annotation.expected["arguments"])]
    )


def offered_tools(conversation: Conversation, reply: Message | None) -> list[dict[str, Any]]:
    """The tools offered when the reply was asked for, as its request sent them; without a
    recorded request, those the conversation offers now."""
    if reply is not None and reply.run_id is not None:
        step = (
            reply.run.messages.filter(
                role=Message.Role.ASSISTANT, version__isnull=True, index__lte=reply.index
            ).count()
            if reply.run
            else 0
        )
        call = ModelCall.objects.filter(run_id=reply.run_id, step=step).first()
        if call is not None and isinstance(call.request, dict):
            tools = call.request.get("tools")
            return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
    return openai_tools(conversation.agent_parameters().enabled_tools)


def openai_tools(names: Iterable[str]) -> list[dict[str, Any]]:
    """The OpenAI `tools` a run offers for these choices: built-in tools, and MCP tools as
    their servers last listed them (a tool no enabled server lists is left out)."""
    names = tuple(names)
    definitions = [
        *agent.default_registry.definitions(names),
        *McpTool.objects.definitions(names),
    ]
    return [definition.to_openai() for definition in definitions]


def preamble_of(conversation: Conversation) -> int:
    """How many messages a request of the conversation sends before its history: one per
    system prompt, then the pre-messages."""
    parameters = conversation.agent_parameters()
    return len(parameters.system_prompts) + len(parameters.pre_messages)


def fixtures(conversation: Conversation) -> list[dict[str, Any]]:
    """Every tool result recorded in the conversation, once per tool and arguments."""
    kept: dict[str, dict[str, Any]] = {}
    calls = ToolCall.objects.filter(
        run__conversation=conversation,
        status__in=[ToolCallStatus.COMPLETED, ToolCallStatus.FAILED],
    ).order_by("run__started_at", "step", "position", "pk")
    for call in calls:
        arguments = decisions.parse_arguments(call.arguments)
        value: Any = call.arguments if arguments is None else arguments
        kept.setdefault(
            decisions.fixture_key(call.name, value),
            {"name": call.name, "arguments": value, "content": call.result},
        )
    return list(kept.values())


def request_messages(conversation: Conversation, rows: Iterable[Message]) -> list[dict[str, Any]]:
    """The history as a request sends it: system prompts and pre-messages first; a message's
    files as stored values (`inline.case_message`), their bytes kept once in storage."""
    parameters = conversation.agent_parameters()
    request = agent.DebugRunRequest(
        parameters=parameters, history=tuple(transcripts.to_chat_messages(rows)), user_message=None
    )
    return [inline.case_message(message) for message in request.messages()]


_DIRECTIVE = re.compile(r"\[\[.*?(?:\]\]|\Z)", re.S)
"""A scripting directive written into a message for a scripted model (`[[call name {...}]]`,
unclosed: to the end): not part of the question."""
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[nrt\"'\\/])")
_SPACES = {"n", "r", "t"}
AFTER_TOOL = "after a tool result"
WHY_NO_TOOL = (
    "This moment follows a tool result, and the reply after it answered from that result "
    "without calling another tool: so the case expects no tool call."
)


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if code in _SPACES:
        return " "
    return chr(int(code[1:], 16)) if len(code) == 5 else code


def question_title(text: str) -> str:
    """A message read as a title: scripting directives and backslash escapes (`\\"`, `\\n`)
    gone, on one line, then cleaned as a model's title is (`clean_title`: wrapping quotes,
    Markdown, a trailing period; cut at a word). Empty when nothing is left."""
    line = " ".join(_ESCAPE.sub(_unescape, _DIRECTIVE.sub(" ", text)).split())
    return clean_title(line) or ""


def default_title(rows: list[Message]) -> str:
    """A case's title from its moment: the question asked (`question_title`), noting a moment
    after a tool result."""
    question = next((r for r in reversed(rows) if r.role == Message.Role.USER), None)
    text = question_title(question.content or "") if question else ""
    text = text or "A conversation"
    if rows and rows[-1].role == Message.Role.TOOL:
        text += f" ({AFTER_TOOL})"
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1].rstrip() + "…"


def why_expected(last_role: str, expected: dict[str, Any]) -> str:
    """Why a case expects what it does when that is not plain: at a tool message (`last_role`,
    the role of the moment's last message), no tool call means the reply answered from the
    result (`WHY_NO_TOOL`); else empty."""
    return WHY_NO_TOOL if last_role == Message.Role.TOOL and expected == NO_TOOL else ""


def set_name_of(name: str) -> str:
    """A case set's name with its spaces collapsed; CaseRefused when it cannot be one."""
    name = " ".join(name.split())
    if not name:
        raise CaseRefused("Name the case set.")
    if len(name) > CaseSet._meta.get_field("name").max_length:  # type: ignore[operator]
        raise CaseRefused("A case set's name has at most 100 characters.")
    return name


def case_set_named(name: str, *, user: Any = None) -> CaseSet:
    case_set, _ = CaseSet.objects.get_or_create(
        name=set_name_of(name), defaults={"created_by": user}
    )
    return case_set


def save_case(
    conversation: Conversation,
    at_message: int,
    *,
    set_name: str,
    user: Any = None,
    expected: dict[str, Any] | None = None,
    source: str = CaseSource.REPLY,
    title: str = "",
    note: str = "",
) -> Case:
    """Keep the moment after message `at_message` as a case of the set `set_name` (made if
    new). Without `expected`, the expectation is what the stored reply after it called.

    What it keeps passes the bounded gate (`storable`) like every stored JSON value.
    """
    if len(note) > NOTE_CHARS:
        raise CaseRefused(
            f"The note is {len(note):,} characters, more than the {NOTE_CHARS:,} allowed."
        )
    found = moment(conversation, at_message)
    if expected is None:
        if found.reply is None:
            raise CaseRefused(
                f"Message {at_message} has no reply after it: say which tool call is expected, "
                "or that none is."
            )
        expected = stored_decision(found.reply)
    try:
        expected = decisions.check_expectation(expected)
    except ValueError as exc:
        raise CaseRefused(f"The expectation is not valid: {exc}.") from None
    run = found.reply.run if found.reply is not None and found.reply.run_id else None
    stored = run.parameters if run is not None else conversation.parameters
    kept = {
        "messages": request_messages(conversation, found.rows),
        "preamble": preamble_of(conversation),
        "tools": offered_tools(conversation, found.reply),
        "parameters": {key: stored[key] for key in SAMPLING if key in (stored or {})},
        "expected": expected,
        "fixtures": fixtures(conversation),
    }
    for name, value in kept.items():
        try:
            storable(value)
        except JsonRefused as exc:
            raise CaseRefused(f"The case cannot be kept: its {name}: {exc}.") from None
    with transaction.atomic():
        return Case.objects.create(
            case_set=case_set_named(set_name, user=user),
            title=" ".join(title.split())[:200] or default_title(found.rows),
            conversation=conversation,
            at_message=at_message,
            source=source,
            note=note,
            created_by=user if getattr(user, "is_authenticated", False) else None,
            **kept,
        )
