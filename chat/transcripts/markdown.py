"""A conversation's active path as a Markdown document, for people: bug reports and sharing.

Each message gets a heading of ours ("### User · #3"); what people and models wrote goes under
it so that nothing in it can break that structure: a user's text (shown as plain text on the
page) is escaped to read literally; a reply keeps its Markdown, with its headings moved below
ours, raw HTML escaped and an unclosed code fence closed; tool arguments, tool results and
reasoning are fenced, each fence longer than any run of backticks inside it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from datetime import datetime

from chat import agent
from chat.models import Conversation, Message, Run, RunStatus

from . import export
from .records import NothingToExport

HEADING = "###"
"""The level of a message's heading; a reply's own headings go below it."""

_LITERAL = re.compile(r"([\\`*_\[\]<>#|~&$])")
_LINE_START = re.compile(r"^([+\-=:]|\d+[.)])")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_CLOSING = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*$")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?=\s|$)")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)\s*$")
_BLOCK_START = re.compile(r"^ {0,3}([>#|]|[*+-]\s|\d+[.)]\s|`{3,}|~{3,})")
_BACKTICKS = re.compile(r"`+")


def lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def literal(text: str) -> str:
    """Plain text that reads as written once rendered: every character Markdown would act on
    is escaped, leading spaces cannot make a code block, and each line break is kept."""
    out: list[str] = []
    for line in lines(text):
        stripped = line.rstrip()
        if not stripped.strip():
            out.append("")
            continue
        body = stripped.lstrip(" \t")
        indent = stripped[: len(stripped) - len(body)].replace("\t", "    ")
        body = _LITERAL.sub(r"\\\1", body)
        body = _LINE_START.sub(lambda found: _escape_last(found.group(1)), body)
        out.append("\u00a0" * len(indent) + body)
    paragraphs: list[str] = []
    for position, line in enumerate(out):
        following = out[position + 1] if position + 1 < len(out) else ""
        paragraphs.append(line + "\\" if line and following else line)
    return _squeezed("\n".join(paragraphs))


def _escape_last(marker: str) -> str:
    """`1.` -> `1\\.`, `-` -> `\\-`: a list, a setext line or a definition no more."""
    return marker[:-1] + "\\" + marker[-1]


def contained(text: str) -> str:
    """A reply's Markdown, kept, but held under the message's heading: its headings go below
    ours (at least level 4), raw HTML is escaped outside code, a setext heading becomes an ATX
    one, and a code fence left open is closed."""
    out: list[str] = []
    fence: str | None = None
    for line in lines(text):
        if fence is not None:
            out.append(line)
            if _closes(line, fence):
                fence = None
            continue
        opened = _FENCE.match(line)
        if opened and not (opened.group(1)[0] == "`" and "`" in opened.group(2)):
            fence = opened.group(1)
            out.append(line)
            continue
        underline = _SETEXT.match(line)
        if underline and out and out[-1].strip() and not _BLOCK_START.match(out[-1]):
            level = 4 if underline.group(1)[0] == "=" else 5
            out[-1] = "#" * level + " " + out[-1].strip()
            continue
        heading = _ATX.match(line)
        if heading:
            level = min(6, len(heading.group(1)) + len(HEADING))
            line = "#" * level + line[heading.end() :]
        out.append(_without_html(line))
    if fence is not None:
        out.append(fence)
    return _squeezed("\n".join(out))


def _closes(line: str, fence: str) -> bool:
    found = _CLOSING.match(line)
    return found is not None and found.group(1)[0] == fence[0] and len(found.group(1)) >= len(fence)


def _without_html(line: str) -> str:
    """`<` escaped outside inline code spans: no raw HTML, so no comment or block left open."""
    parts: list[str] = []
    position = 0
    runs = list(_BACKTICKS.finditer(line))
    index = 0
    while index < len(runs):
        opening = runs[index]
        closing = next(
            (later for later in runs[index + 1 :] if len(later.group()) == len(opening.group())),
            None,
        )
        if closing is None:
            index += 1
            continue
        parts.append(line[position : opening.start()].replace("<", "\\<"))
        parts.append(line[opening.start() : closing.end()])
        position = closing.end()
        index = runs.index(closing) + 1
    parts.append(line[position:].replace("<", "\\<"))
    return "".join(parts)


def fenced(text: str, info: str = "text") -> str:
    """`text` verbatim in a code block whose fence no line of it can close."""
    longest = max((len(found) for found in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = "\n".join(lines(text))
    return f"{fence}{info}\n{body}\n{fence}"


def code(text: str) -> str:
    """`text` as an inline code span, whatever backticks it holds (on one line)."""
    flat = " ".join(text.split("\n"))
    longest = max((len(found) for found in _BACKTICKS.findall(flat)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{ticks}{pad}{flat}{pad}{ticks}"


def _squeezed(text: str) -> str:
    return text.strip("\n")


def _readable(raw: str) -> tuple[str, str]:
    """Arguments or a result as indented JSON when they are a JSON object or array, else as
    they were sent, with the info string of their fence."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw, "text"
    if not isinstance(value, dict | list):
        return raw, "text"
    return json.dumps(value, indent=2, ensure_ascii=False), "json"


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else ""


def document(conversation: Conversation, rows: Iterable[Message] | None = None) -> Iterator[str]:
    """The Markdown of the active path (or `rows`), a block at a time: a long conversation is
    written without the whole document in memory."""
    path = list(conversation.messages.active() if rows is None else rows)
    run_ids = {row.run_id for row in path if row.run_id is not None}
    runs = {run.pk: run for run in Run.objects.filter(pk__in=run_ids)}
    yield from _head(conversation, runs.values())
    names: dict[str, str] = {}
    for position, row in enumerate(path):
        yield _message(row, names)
        following = path[position + 1] if position + 1 < len(path) else None
        run = runs.get(row.run_id) if row.run_id is not None else None
        if run is not None and (following is None or following.run_id != row.run_id):
            note = _run_note(run)
            if note:
                yield note
    if not path:
        yield "_No messages yet._\n\n"


def text(conversation: Conversation, rows: Iterable[Message] | None = None) -> str:
    return "".join(document(conversation, rows))


def _head(conversation: Conversation, runs: Iterable[Run]) -> Iterator[str]:
    yield f"# {literal(str(conversation))}\n\n"
    facts = [
        f"Conversation {conversation.pk} of {literal(conversation.owner.get_username())}, "
        f"started {_when(conversation.created_at)}"
    ]
    if conversation.agent_version_id is not None:
        facts.append(f"Agent: {literal(str(conversation.agent_version))}")
    models = list(dict.fromkeys(run.model for run in runs if run.model))
    if models:
        facts.append("Model: " + ", ".join(literal(model) for model in models))
    parameters = conversation.agent_parameters()
    if parameters.enabled_tools:
        facts.append("Tools: " + ", ".join(code(name) for name in parameters.enabled_tools))
    yield "".join(f"- {fact}\n" for fact in facts) + "\n"
    for number, prompt in enumerate(parameters.system_prompts, 1):
        yield f"{HEADING} System prompt {number}\n\n{fenced(prompt)}\n\n"
    for message in parameters.pre_messages:
        label = f"{message.role.capitalize()} · pre-message"
        yield f"{HEADING} {label}\n\n{literal(message.content or '')}\n\n"


def _message(row: Message, names: dict[str, str]) -> str:
    """One message under its heading; `names` learns the tool of each call id it asks for."""
    heading = f"{HEADING} {row.get_role_display()} · #{row.index}"
    if row.role == Message.Role.TOOL:
        name = names.get(row.tool_call_id, "")
        heading += f" · {literal(agent.humanize(name)) if name else 'unknown tool'}"
    parts = [f"{heading} · {_when(row.created_at)}"]
    if row.reasoning:
        parts.append(f"**Reasoning**\n\n{fenced(row.reasoning)}")
    content = row.content or ""
    if row.role == Message.Role.TOOL:
        parts.append(f"Result of call {code(row.tool_call_id)}:\n\n{fenced(*_readable(content))}")
    elif row.role == Message.Role.ASSISTANT:
        if content.strip():
            parts.append(contained(content))
    elif content.strip():
        parts.append(literal(content))
    for value in row.tool_calls or ():
        call = agent.ToolCall.from_openai(value)
        names[call.id] = call.name
        parts.append(
            f"**Tool call: {literal(agent.humanize(call.name))}** ({code(call.name)}, "
            f"call {code(call.id)})\n\n{fenced(*_readable(call.arguments))}"
        )
    return "\n\n".join(parts) + "\n\n"


def _run_note(run: Run) -> str:
    """How a run that did not complete ended, after its last message on the path."""
    if run.status == RunStatus.COMPLETED:
        return ""
    if run.status == RunStatus.IN_PROGRESS:
        return "> _The reply was still being written when this was downloaded._\n\n"
    reason = f": {literal(run.error)}" if run.error else ""
    return f"> **{literal(run.get_status_display())}**{reason}\n\n"


def records(
    conversations: Iterable[Conversation],
) -> Iterator[tuple[Conversation, None, Iterator[str] | NothingToExport]]:
    """Each conversation (fetched with `for_export(full=False)`) with its document in pieces,
    as `export.records` gives the other formats; one without messages has none."""
    for conversation in conversations:
        rows = export.active_rows(conversation)
        found = document(conversation, rows) if rows else NothingToExport("no messages")
        yield conversation, None, found
