"""ScriptedChatClient: the offline default model, and the test double for every model turn."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .contracts import AgentParameters
from .errors import ChatClientError
from .events import ModelRequestSent, StreamItem
from .messages import Attachment, ChatMessage, ToolCall
from .stream import ChatCompletionStreamParser
from .titles import TITLE_CHARS, clean_title
from .tools import ToolDefinition, humanize
from .wire import build_request_body, encode_body, payload_sha256

SCRIPTED_MODEL = "scripted"
SCRIPTED_LABEL = "Scripted model (offline)"
_WORDS = re.compile(r"\s*\S+\s*|\s+")
_TIME_ZONE = re.compile(r"\b([A-Z][A-Za-z_]+/[A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_]+)?)\b")
_KEY_WORD = re.compile(r"[^\W\d_][\w'\u2019-]*[^\W_]")
TITLE_WORDS = 4
_STOP_WORDS = """
    about after again all also am an and any are as at be because been before being below
    between both but by can could did do does doing don't down during each few following for
    from further get had has have having he help her here hers him his how i if i'm in into
    is it it's its just know let like look me more most my need no nor not now of off on
    once only or other our out over own please same she should so some such tell than that
    the their them then there these they think this those through to too under until up us
    very want was we were what when where which while who whom why will with would you your
    yours
"""
STOP_WORDS = frozenset(_STOP_WORDS.split())


@dataclass(frozen=True)
class ScriptedTurn:
    """One canned model turn. `error` is raised after the text has streamed."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str = ""
    finish_reason: str | None = None
    error: ChatClientError | None = None
    usage: tuple[int, int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class ScriptedChatClient:
    """A deterministic model that speaks through the same stream parser as a real provider.

    Given `turns`, it plays them in order (for tests). Without, it answers from a small script:
    it calls the time and handoff-note tools when asked in plain words (both in one turn when
    asked for both), then answers quoting their results.
    """

    def __init__(
        self,
        turns: Iterable[ScriptedTurn | str] | None = None,
        *,
        delay: float = 0.0,
        model: str = SCRIPTED_MODEL,
    ) -> None:
        self.model = model
        self.label = SCRIPTED_LABEL if model == SCRIPTED_MODEL else f"{model} (scripted)"
        self.delay = delay
        self.requests: list[dict[str, Any]] = []
        self._turns: deque[ScriptedTurn] | None = None
        if turns is not None:
            self._turns = deque(
                ScriptedTurn(text=turn) if isinstance(turn, str) else turn for turn in turns
            )

    async def aclose(self) -> None:
        return None

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolDefinition] = (),
        parameters: AgentParameters = AgentParameters(),
    ) -> AsyncIterator[StreamItem]:
        body = build_request_body(messages, model=self.model, tools=tools, parameters=parameters)
        self.requests.append(body)
        digest = payload_sha256(encode_body(body))
        if self._turns is None:
            turn = respond(messages, [tool.name for tool in tools])
        elif self._turns:
            turn = self._turns.popleft()
        else:
            raise ChatClientError(
                "the scripted model has no turns left", request_body=body, request_sha256=digest
            )
        started = time.monotonic()
        yield ModelRequestSent(body=body, url="scripted:", sha256=digest)
        parser = ChatCompletionStreamParser()
        raw: list[tuple[float, str]] = []
        for chunk in _chunks(turn, body):
            raw.append(
                (round((time.monotonic() - started) * 1000, 1), f"data: {json.dumps(chunk)}")
            )
            for item in parser.feed_chunk(chunk):
                yield item
            if self.delay:
                await asyncio.sleep(self.delay)
        if turn.error is not None:
            turn.error.request_body, turn.error.request_sha256 = body, digest
            turn.error.raw = tuple(raw)
            raise turn.error
        raw.append((round((time.monotonic() - started) * 1000, 1), "data: [DONE]"))
        yield dataclasses.replace(parser.finish(), raw=tuple(raw))

    def __repr__(self) -> str:
        return f"ScriptedChatClient(model={self.model!r})"


def respond(messages: Sequence[ChatMessage], offered: Sequence[str]) -> ScriptedTurn:
    """The offline script: pick tool calls for a user message, or quote the tool replies."""
    if not messages:
        return ScriptedTurn(text="Hello! Say something and I will answer.")
    last = messages[-1]
    if last.role == "tool":
        return _quote_tool_replies(messages)
    prompt = last.content or ""
    lowered = prompt.lower()
    wanted: list[tuple[str, dict[str, Any]]] = []
    if re.search(r"\b(time|clock|date|today)\b", lowered):
        zone = _TIME_ZONE.search(prompt)
        wanted.append(("get_current_time", {"timezone": zone.group(1)} if zone else {}))
    if re.search(r"\b(hand ?off|handover|note)\b", lowered):
        wanted.append(("handoff_note", {"note": prompt.strip()[:500]}))
    if re.search(r"\b(cards?|search|look up)\b", lowered):
        wanted.append(("search_cards", {"query": prompt.strip()[:200]}))
    known = {name for name, _ in wanted} | {"get_current_time", "handoff_note", "search_cards"}
    for name in offered:
        if name not in known and humanize(name).lower() in lowered:
            wanted.append((name, {}))
    calls = [(name, args) for name, args in wanted if name in offered]
    missing = [name for name, _ in wanted if name not in offered]
    if calls:
        used = sum(len(message.tool_calls) for message in messages)
        return ScriptedTurn(
            tool_calls=tuple(
                ToolCall(id=f"call_{used + number}", name=name, arguments=json.dumps(args))
                for number, (name, args) in enumerate(calls, start=1)
            ),
            reasoning="The user asked for "
            + " and ".join(humanize(name).lower() for name, _ in calls)
            + "; the tools answer that better than I can.",
        )
    if missing:
        names = " and ".join(humanize(name) for name in missing)
        return ScriptedTurn(
            text=f"I would use {names} for that, but it is not enabled for this conversation. "
            "Turn it on in the agent settings and ask again."
        )
    if last.attachments:
        seen = "; ".join(_seen(attachment) for attachment in last.attachments)
        said = f" and said: “{prompt.strip()[:200]}”" if prompt.strip() else ""
        return ScriptedTurn(
            text=f"You attached {seen}{said}. I am the scripted model: I read no files, but a "
            "model behind a provider gets each one as the inspector shows."
        )
    return ScriptedTurn(
        text=f"You said: “{prompt.strip()[:200]}”. I am the scripted model: I run offline and "
        "answer from a script. Ask me for the time, to search the cards, or to leave a handoff "
        "note (or several at once), and I will call the tools enabled for this conversation."
    )


def _seen(attachment: Attachment) -> str:
    if attachment.kind == "pdf":
        return f"{attachment.name} (a PDF of {attachment.pages} pages)"
    what = "an image" if attachment.kind == "image" else "a text file"
    return f"{attachment.name} ({what})"


def _tokens(content: Any) -> int:
    """A rough count of a message's words (an image part counts as 85, OpenAI's low detail)."""
    if isinstance(content, list):
        return sum(
            len(str(part.get("text") or "").split()) if part.get("type") == "text" else 85
            for part in content
        )
    return len((content or "").split())


def scripted_title(first_message: str) -> str | None:
    """The scripted model's title for a conversation, from its first message alone.

    A first message that fits in TITLE_CHARS is its own title (spaces collapsed, as the
    automatic title has it). A longer one becomes its key words: the TITLE_WORDS most
    frequent words of two letters or more that are not STOP_WORDS (a tie goes to the word
    seen first), in the order they first appear, the first letter capitalised. None when the
    message has no such word.
    """
    line = " ".join(first_message.split())
    if len(line) <= TITLE_CHARS:
        return line or None
    words = [match.group() for match in _KEY_WORD.finditer(line)]
    keys = [word for word in words if word.lower() not in STOP_WORDS]
    counts = Counter(word.lower() for word in keys)
    first_seen: dict[str, str] = {}
    for word in keys:
        first_seen.setdefault(word.lower(), word)
    position = {word: number for number, word in enumerate(first_seen)}
    chosen = set(sorted(first_seen, key=lambda word: (-counts[word], position[word]))[:TITLE_WORDS])
    title = " ".join(first_seen[word] for word in first_seen if word in chosen)
    return clean_title(title[:1].upper() + title[1:])


def _quote_tool_replies(messages: Sequence[ChatMessage]) -> ScriptedTurn:
    replies: list[ChatMessage] = []
    for message in reversed(messages):
        if message.role != "tool":
            break
        replies.insert(0, message)
    names = {
        call.id: call.name
        for message in messages
        if message.role == "assistant"
        for call in message.tool_calls
    }
    lines = [_summarise(names.get(reply.tool_call_id or "", "tool"), reply) for reply in replies]
    return ScriptedTurn(text="Here is what the tools said:\n\n" + "\n".join(lines))


def _summarise(name: str, reply: ChatMessage) -> str:
    content = reply.content or ""
    try:
        data = json.loads(content)
    except json.JSONDecodeError:
        data = None
    label = humanize(name)
    if isinstance(data, dict) and "error" in data:
        return f"- {label} failed: {data['error']}"
    if name == "get_current_time" and isinstance(data, dict):
        return f"- {label}: it is {data.get('iso')} ({data.get('timezone')})."
    if name == "handoff_note" and isinstance(data, dict):
        return f"- {label}: recorded for {data.get('recipient')}: “{data.get('note')}”."
    if name == "search_cards" and isinstance(data, dict):
        titles = [str(card.get("title")) for card in data.get("matches") or []]
        found = ", ".join(f"**{title}**" for title in titles) if titles else "no matching card"
        return f"- {label}: {found}."
    return f"- {label}: {content[:300]}"


def _chunks(turn: ScriptedTurn, body: dict[str, Any]) -> Iterable[dict[str, Any]]:
    base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": body["model"]}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    yield chunk({"role": "assistant", "content": ""})
    for word in _WORDS.findall(turn.reasoning):
        yield chunk({"reasoning_content": word})
    for word in _WORDS.findall(turn.text):
        yield chunk({"content": word})
    for index, call in enumerate(turn.tool_calls):
        head = {"index": index, "id": call.id, "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
        middle = len(call.arguments) // 2
        for part in (call.arguments[:middle], call.arguments[middle:]):
            if part:
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
    if turn.error is not None:
        return
    finish_reason = turn.finish_reason or ("tool_calls" if turn.tool_calls else "stop")
    yield chunk({}, finish_reason)
    if turn.usage is not None:
        prompt_tokens, completion_tokens = turn.usage
    else:
        prompt_tokens = sum(_tokens(message.get("content")) + 4 for message in body["messages"])
        completion_tokens = len(_WORDS.findall(turn.text + turn.reasoning)) + 8 * len(
            turn.tool_calls
        )
    yield {
        **base,
        "choices": [],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
