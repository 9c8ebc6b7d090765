"""What an OpenAI-compatible endpoint actually does, found by a few small requests.

The requests go through OpenAICompatibleChatClient, as runs do, so the report tells what the lab
will meet. Some facts never reach the client's StreamItems (which field carried the reasoning,
whether the answer was SSE at all), so the HTTP transport keeps a copy of each raw answer.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date
from typing import Any

import httpx

from chat import agent
from chat.agent import events
from chat.agent.clients import OpenAICompatibleChatClient
from chat.agent.errors import ChatClientError, ProviderConnectionError
from chat.agent.messages import EmptyContent

CHAT_PROMPT = "Reply with one short sentence that contains the word pong."
TOOL_PROMPT = "What time is it in UTC? Call the get_current_time tool to find out."
TOOL_NAME = "get_current_time"
TOOL_REPLY = json.dumps({"timezone": "UTC", "iso": "2025-01-01T12:00:00+00:00"})
REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_details", "thinking")
CONTENT_FORMS: tuple[EmptyContent, ...] = ("empty", "null", "omit")
CONTENT_SHOWN = {"empty": '""', "null": "null", "omit": "omitted"}
FOREIGN_ID = "call_probe_0001"
"""A tool call id of our making, not the server's: servers like Mistral refuse it."""
ALNUM9 = re.compile(r"^[a-zA-Z0-9]{9}$")
REFUSED = (400, 422)


@dataclass
class Answer:
    """One raw HTTP answer as it came off the wire."""

    status: int
    content_type: str
    body: bytearray = field(default_factory=bytearray)

    def chunks(self) -> list[dict[str, Any]]:
        """The JSON objects of an SSE body (or the one object of a JSON body)."""
        text = self.body.decode("utf-8", errors="replace")
        if "event-stream" not in self.content_type:
            return [_loads(text)]
        found = []
        for line in text.splitlines():
            name, _, value = line.partition(":")
            if name == "data" and value.strip() not in ("", "[DONE]"):
                found.append(_loads(value.strip()))
        return [chunk for chunk in found if chunk]


class _TeeStream(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, answer: Answer) -> None:
        self._stream = stream
        self._answer = answer

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            self._answer.body.extend(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class RecordingTransport(httpx.AsyncBaseTransport):
    """An httpx transport that keeps a copy of every answer's raw body."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.answers: list[Answer] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        answer = Answer(response.status_code, response.headers.get("content-type", ""))
        self.answers.append(answer)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_TeeStream(response.stream, answer),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass
class Turn:
    """What one streamed request showed."""

    ok: bool = False
    error: str = ""
    http_status: int | None = None
    streamed: bool | None = None
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    reasoning_fields: list[str] = field(default_factory=list)
    time_to_first_token: float | None = None
    duration: float = 0.0


@dataclass
class Report:
    """Everything check_provider found; `works` is what its exit status says."""

    base_url: str
    model: str = ""
    api_key_set: bool = False
    unreachable: str = ""
    models: list[str] | None = None
    models_error: str = ""
    chat: Turn | None = None
    tools: Turn | None = None
    content: dict[str, Turn] = field(default_factory=dict)
    configured_content: str = "empty"
    problem: str = ""
    parallel_tool_calls: bool | None = None
    """Whether the tool probe went through with `parallel_tool_calls` (None: not known)."""
    parallel_error: str = ""
    """The refusal, when the server refused `parallel_tool_calls` (then probed without it)."""
    foreign_ids: Turn | None = None
    """The follow-up sent back with the id FOREIGN_ID instead of the server's own (if probed)."""

    @property
    def chat_works(self) -> bool:
        return self.chat is not None and self.chat.ok and bool(self.chat.text.strip())

    @property
    def tool_calling_works(self) -> bool:
        calls = self.tools.tool_calls if self.tools is not None and self.tools.ok else []
        called = any(call["name"] == TOOL_NAME and call["arguments_valid"] for call in calls)
        return called and any(turn.ok for turn in self.content.values())

    @property
    def works(self) -> bool:
        return self.chat_works and self.tool_calling_works

    @property
    def reasoning_fields(self) -> list[str]:
        turns = [self.chat, self.tools, *self.content.values()]
        seen = [name for turn in turns if turn is not None for name in turn.reasoning_fields]
        return list(dict.fromkeys(seen))

    @property
    def accepted_content(self) -> list[EmptyContent]:
        """The forms of a tool-call-only message's content the server took, "" first."""
        return [form for form in CONTENT_FORMS if form in self.content and self.content[form].ok]

    @property
    def server_ids(self) -> list[str]:
        """The ids of the tool calls the server made."""
        return [call["id"] for call in self.tools.tool_calls] if self.tools is not None else []

    @property
    def server_ids_alnum9(self) -> bool:
        ids = self.server_ids
        return bool(ids) and all(ALNUM9.match(call_id) for call_id in ids)

    @property
    def foreign_ids_refused(self) -> bool | None:
        """Whether the server refused a tool round under an id it did not make (None: unknown).

        The probe differs from an accepted follow-up only by its id, so a 400 or 422 is the id.
        """
        turn = self.foreign_ids
        if turn is None:
            return None
        if turn.ok:
            return False
        return True if turn.http_status in REFUSED else None

    @property
    def tool_call_ids(self) -> str:
        """The profile setting: "alnum9" when ids must match ^[a-zA-Z0-9]{9}$, else "any"."""
        return "alnum9" if self.server_ids_alnum9 or self.foreign_ids_refused else "any"

    @property
    def recommended_content(self) -> str | None:
        """The AGENTLAB_TOOL_CALL_CONTENT value to use: the configured one if accepted."""
        accepted = [
            form for form in CONTENT_FORMS if form in self.content and self.content[form].ok
        ]
        if self.configured_content in accepted:
            return self.configured_content
        return accepted[0] if accepted else None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            chat_works=self.chat_works,
            tool_calling_works=self.tool_calling_works,
            works=self.works,
            reasoning_fields=self.reasoning_fields,
            recommended_tool_call_content=self.recommended_content,
            foreign_ids_refused=self.foreign_ids_refused,
            tool_call_ids=self.tool_call_ids,
        )
        return data


def profile_fields(report: Report, *, today: date | None = None) -> dict[str, Any]:
    """The quirks of a ProviderProfile as the probe found them (no name, URL or key)."""
    accepted = report.accepted_content
    return {
        "model": report.model,
        "tool_call_content": accepted[0] if accepted else "empty",
        "tool_call_ids": report.tool_call_ids,
        "reasoning_field": (
            "reasoning_content" if "reasoning_content" in report.reasoning_fields else ""
        ),
        "parallel_tool_calls": report.parallel_tool_calls is not False,
        "notes": summary(report, today=today),
    }


def summary(report: Report, *, today: date | None = None) -> str:
    """A short account of what the probe found, dated, for a profile's notes."""
    day = (today or date.today()).isoformat()
    parts = [f"check_provider {day}: model {report.model}"]
    chat = report.chat
    if chat is not None:
        parts.append("chat ok" if report.chat_works else f"chat failed ({_clip(chat.error, 60)})")
        usage = chat.usage or (report.tools.usage if report.tools else None)
        parts.append("usage chunk " + ("yes" if usage else "no"))
    if report.tools is not None:
        if report.tools.tool_calls:
            parts.append(f"tool calls with finish_reason {report.tools.finish_reason}")
        else:
            parts.append("no tool call")
    if report.content:
        verdicts = [
            f"{CONTENT_SHOWN[form]} {'ok' if turn.ok else 'refused'}"
            for form, turn in report.content.items()
        ]
        parts.append("tool-call-only content: " + ", ".join(verdicts))
    if report.parallel_tool_calls is False:
        parts.append(f"parallel_tool_calls refused ({_clip(report.parallel_error, 60)})")
    elif report.parallel_tool_calls:
        parts.append("parallel_tool_calls ok")
    ids = "own ids 9 letters/digits" if report.server_ids_alnum9 else "own ids free-form"
    refused = report.foreign_ids_refused
    if refused is not None:
        ids += f", {FOREIGN_ID} {'refused' if refused else 'ok'}"
    parts.append(f"tool call ids: {ids}")
    fields = report.reasoning_fields
    parts.append("reasoning: " + (", ".join(fields) if fields else "none seen"))
    return "; ".join(parts) + "."


async def check_provider(
    *,
    base_url: str,
    model: str | None,
    api_key: str | None = None,
    read_timeout: float = 60.0,
    configured_content: str = "empty",
    probe_ids: bool = False,
) -> Report:
    """Probe the endpoint: list models, a plain streamed answer, a tool call and its follow-up.

    The tool probe sends `parallel_tool_calls`; a 400 that names it is noted and the probe is
    sent again without it (and so are the next ones). The follow-up sends back the
    tool-call-only assistant message with content `""`, then `null` (then with no content key,
    if both are refused) to find what the endpoint accepts. With `probe_ids`, one more
    follow-up goes back under the id FOREIGN_ID, to see whether ids of our making are refused.
    """
    transport = RecordingTransport()
    async with httpx.AsyncClient(transport=transport) as http:
        client = OpenAICompatibleChatClient(
            base_url=base_url,
            api_key=api_key,
            model=model or "",
            # Raw bodies are read as they arrive: ask for them uncompressed.
            extra_headers={"Accept-Encoding": "identity"},
            connect_timeout=min(read_timeout, 10.0),
            read_timeout=read_timeout,
            max_retries=0,
            http_client=http,
        )
        report = Report(
            base_url=client.base_url,
            api_key_set=bool(api_key),
            configured_content=configured_content,
        )
        try:
            report.models = await client.list_models()
        except ProviderConnectionError as exc:
            report.unreachable = str(exc)
            return report
        except ChatClientError as exc:
            report.models_error = str(exc)
        report.model = model or (report.models[0] if report.models else "")
        if not report.model:
            report.problem = "no model to probe: pass --model or set AGENTLAB_MODEL"
            return report
        client.model = client.label = report.model
        user = agent.ChatMessage(role="user", content=CHAT_PROMPT)
        report.chat = await _turn(client, transport, [user])
        definition = agent.default_registry.definitions([TOOL_NAME])
        question = agent.ChatMessage(role="user", content=TOOL_PROMPT)
        report.tools = await _turn(client, transport, [question], tools=definition)
        if _refuses_parallel(report.tools):
            report.parallel_tool_calls = False
            report.parallel_error = report.tools.error
            client.wire = dataclasses.replace(client.wire, parallel_tool_calls=False)
            report.tools = await _turn(client, transport, [question], tools=definition)
        elif report.tools.ok:
            report.parallel_tool_calls = True
        call = _first_call(report.tools)
        follow_up = [
            question,
            agent.ChatMessage(role="assistant", tool_calls=(call,)),
            agent.ChatMessage(role="tool", tool_call_id=call.id, content=TOOL_REPLY),
        ]
        for form in CONTENT_FORMS:
            if form == "omit" and any(turn.ok for turn in report.content.values()):
                break
            client.empty_content = form
            report.content[form] = await _turn(client, transport, follow_up, tools=definition)
        accepted = report.accepted_content
        if probe_ids and accepted and report.server_ids:
            client.empty_content = accepted[0]
            ours = agent.ToolCall(id=FOREIGN_ID, name=call.name, arguments=call.arguments)
            foreign = [
                question,
                agent.ChatMessage(role="assistant", tool_calls=(ours,)),
                agent.ChatMessage(role="tool", tool_call_id=FOREIGN_ID, content=TOOL_REPLY),
            ]
            report.foreign_ids = await _turn(client, transport, foreign, tools=definition)
    return report


def _refuses_parallel(turn: Turn) -> bool:
    return (
        not turn.ok and turn.http_status in REFUSED and "parallel_tool_calls" in turn.error.lower()
    )


async def _turn(
    client: OpenAICompatibleChatClient,
    transport: RecordingTransport,
    messages: Sequence[agent.ChatMessage],
    *,
    tools: Sequence[agent.ToolDefinition] = (),
) -> Turn:
    turn = Turn()
    transport.answers.clear()
    started = time.monotonic()
    try:
        async for item in client.stream(messages, tools=tools):
            match item:
                case events.ModelRequestSent(status_code=status):
                    turn.http_status = status
                case events.TextDelta() | events.ReasoningDelta():
                    if turn.time_to_first_token is None:
                        turn.time_to_first_token = time.monotonic() - started
                case events.Usage():
                    turn.usage = asdict(item)
                case events.TurnEnd(message, finish_reason):
                    turn.ok = True
                    turn.text = message.content or ""
                    turn.finish_reason = finish_reason
                    turn.tool_calls = [_call_info(call) for call in message.tool_calls]
    except ChatClientError as exc:
        turn.error = str(exc)
        turn.http_status = exc.status_code
    turn.duration = time.monotonic() - started
    if transport.answers:
        answer = transport.answers[-1]
        turn.streamed = "event-stream" in answer.content_type
        turn.reasoning_fields = _reasoning_fields(answer.chunks())
    return turn


def _call_info(call: agent.ToolCall) -> dict[str, Any]:
    try:
        arguments = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        arguments = None
    return {
        "id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "arguments_valid": isinstance(arguments, dict),
    }


def _first_call(turn: Turn) -> agent.ToolCall:
    """The model's call to send back, or a stand-in when it made none (to probe content)."""
    for info in turn.tool_calls:
        if info["name"] == TOOL_NAME:
            return agent.ToolCall(id=info["id"], name=TOOL_NAME, arguments=info["arguments"])
    return agent.ToolCall(id="call_probe", name=TOOL_NAME, arguments='{"timezone": "UTC"}')


def _reasoning_fields(chunks: list[dict[str, Any]]) -> list[str]:
    seen: list[str] = []
    for chunk in chunks:
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") or choice.get("message")
            if not isinstance(delta, dict):
                continue
            seen.extend(name for name in REASONING_FIELDS if delta.get(name))
    return list(dict.fromkeys(seen))


def _loads(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def describe(report: Report) -> list[str]:
    """The report as lines for a terminal."""
    key = "API key set" if report.api_key_set else "no API key"
    lines = [f"Provider {report.base_url} · model {report.model or '?'} · {key}"]
    if report.unreachable:
        return [*lines, _row("unreachable", report.unreachable)]
    if report.models is not None:
        shown = ", ".join(report.models[:8]) + (" …" if len(report.models) > 8 else "")
        lines.append(_row("models", f"{len(report.models)} listed: {shown or 'none'}"))
        if report.model and report.models and report.model not in report.models:
            lines.append(_row("", f"(the model {report.model!r} is not among them)"))
    else:
        lines.append(_row("models", f"listing not supported: {report.models_error}"))
    if report.problem or report.chat is None or report.tools is None:
        return [*lines, _row("problem", report.problem)]
    chat, tools = report.chat, report.tools
    if chat.ok:
        verdict = "ok" if report.chat_works else "NO TEXT"
        lines.append(
            _row(
                "chat",
                f"{verdict}: {_clip(chat.text)!r} in {chat.duration:.2f}s{_first(chat)}, "
                f"finish_reason {chat.finish_reason}, "
                f"{'streamed (SSE)' if chat.streamed else 'answered with JSON, not SSE'}",
            )
        )
    else:
        lines.append(_row("chat", f"FAILED: {chat.error}"))
    usage = chat.usage or tools.usage
    if usage:
        counts = f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion"
        lines.append(_row("usage chunk", f"yes: {counts} tokens"))
    else:
        lines.append(_row("usage chunk", "no (token counts will show 0)"))
    fields = report.reasoning_fields
    lines.append(_row("reasoning", ", ".join(fields) if fields else "none seen"))
    if not tools.ok:
        lines.append(_row("tool calling", f"FAILED: {tools.error}"))
    elif not tools.tool_calls:
        lines.append(
            _row(
                "tool calling",
                f"FAILED: no tool call (finish_reason {tools.finish_reason}, "
                f"text {_clip(tools.text)!r})",
            )
        )
    else:
        calls = ", ".join(
            f"{call['name']}({call['arguments']})"
            + ("" if call["arguments_valid"] else " [arguments are not a JSON object]")
            for call in tools.tool_calls
        )
        lines.append(_row("tool calling", f"{calls}; finish_reason {tools.finish_reason!r}"))
        lines.append(_row("tool call ids", _ids(report)))
    if report.parallel_tool_calls is False:
        lines.append(
            _row("parallel calls", f"parallel_tool_calls REFUSED: {report.parallel_error}")
        )
        lines.append(
            _row(
                "",
                "→ probed again without it; the environment-configured endpoint always sends "
                "it, a provider profile can leave it out (--save-profile NAME)",
            )
        )
    elif report.parallel_tool_calls:
        lines.append(_row("parallel calls", "parallel_tool_calls sent, not refused"))
    for form, turn in report.content.items():
        verdict = "accepted" if turn.ok else f"rejected: {turn.error}"
        lines.append(_row(f"content {CONTENT_SHOWN[form]}", verdict))
    recommended = report.recommended_content
    if recommended and recommended != report.configured_content:
        lines.append(_row("", f"→ set AGENTLAB_TOOL_CALL_CONTENT={recommended}"))
    lines.append(
        f"Chat {'works' if report.chat_works else 'does NOT work'}; tool calling "
        f"{'works' if report.tool_calling_works else 'does NOT work'}."
    )
    return lines


def _ids(report: Report) -> str:
    shown = ", ".join(repr(call_id) for call_id in report.server_ids[:3])
    text = f"the server's: {shown}"
    if report.server_ids_alnum9:
        text += " (9 letters or digits, like Mistral's)"
    turn, refused = report.foreign_ids, report.foreign_ids_refused
    if turn is not None:
        if refused:
            text += f"; ours ({FOREIGN_ID}) REFUSED: {turn.error}"
        elif refused is None:
            text += f"; ours ({FOREIGN_ID}) could not be checked: {turn.error}"
        else:
            text += f"; ours ({FOREIGN_ID}) taken too"
    return text


def _row(label: str, text: str) -> str:
    return f"  {label:<15} {text}"


def _first(turn: Turn) -> str:
    if turn.time_to_first_token is None:
        return ""
    return f" (first token {turn.time_to_first_token:.2f}s)"


def _clip(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
