"""Probe an endpoint with a few small requests, through the client runs use."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import httpx

from .. import events
from ..clients import OpenAICompatibleChatClient
from ..errors import ChatClientError, ProviderConnectionError
from ..messages import Attachment, ChatMessage, ToolCall
from ..tools import ToolDefinition, default_registry
from .report import (
    CHAT_PROMPT,
    CONTENT_FORMS,
    FOREIGN_ID,
    IMAGE_PNG,
    IMAGE_PROMPT,
    REASONING_FIELDS,
    REFUSED,
    TOOL_NAME,
    TOOL_PROMPT,
    TOOL_REPLY,
    Report,
    Turn,
)
from .transport import RecordingTransport


async def check_provider(
    *,
    base_url: str,
    model: str | None,
    api_key: str | None = None,
    read_timeout: float = 60.0,
    configured_content: str = "empty",
    probe_ids: bool = False,
) -> Report:
    """Probe the endpoint: list models, a plain streamed answer, an image question (when chat
    works: a refusal means the model takes no images), a tool call and its follow-up.

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
        user = ChatMessage(role="user", content=CHAT_PROMPT)
        report.chat = await _turn(client, transport, [user])
        definition = default_registry.definitions([TOOL_NAME])
        question = ChatMessage(role="user", content=TOOL_PROMPT)
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
            ChatMessage(role="assistant", tool_calls=(call,)),
            ChatMessage(role="tool", tool_call_id=call.id, content=TOOL_REPLY),
        ]
        for form in CONTENT_FORMS:
            if form == "omit" and any(turn.ok for turn in report.content.values()):
                break
            client.empty_content = form
            report.content[form] = await _turn(client, transport, follow_up, tools=definition)
        accepted = report.accepted_content
        if probe_ids and accepted and report.server_ids:
            client.empty_content = accepted[0]
            ours = ToolCall(id=FOREIGN_ID, name=call.name, arguments=call.arguments)
            foreign = [
                question,
                ChatMessage(role="assistant", tool_calls=(ours,)),
                ChatMessage(role="tool", tool_call_id=FOREIGN_ID, content=TOOL_REPLY),
            ]
            report.foreign_ids = await _turn(client, transport, foreign, tools=definition)
        if report.chat_works:
            report.images = await _turn(client, transport, [_image_question()])
    return report


def _image_question() -> ChatMessage:
    """A user message with a small PNG, sent as an image_url part as a run sends one."""
    data = base64.b64decode(IMAGE_PNG)
    image = Attachment(
        name="probe.png",
        content_type="image/png",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        kind="image",
        content=f"data:image/png;base64,{IMAGE_PNG}",
    )
    return ChatMessage(role="user", content=IMAGE_PROMPT, attachments=(image,))


def _refuses_parallel(turn: Turn) -> bool:
    return (
        not turn.ok and turn.http_status in REFUSED and "parallel_tool_calls" in turn.error.lower()
    )


async def _turn(
    client: OpenAICompatibleChatClient,
    transport: RecordingTransport,
    messages: Sequence[ChatMessage],
    *,
    tools: Sequence[ToolDefinition] = (),
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


def _call_info(call: ToolCall) -> dict[str, Any]:
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


def _first_call(turn: Turn) -> ToolCall:
    """The model's call to send back, or a stand-in when it made none (to probe content)."""
    for info in turn.tool_calls:
        if info["name"] == TOOL_NAME:
            return ToolCall(id=info["id"], name=TOOL_NAME, arguments=info["arguments"])
    return ToolCall(id="call_probe", name=TOOL_NAME, arguments='{"timezone": "UTC"}')


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
