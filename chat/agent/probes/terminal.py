"""A probe report as lines for a terminal."""

from __future__ import annotations

from .report import CONTENT_SHOWN, FOREIGN_ID, Report, Turn, clip


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
                f"{verdict}: {clip(chat.text)!r} in {chat.duration:.2f}s{_first(chat)}, "
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
    images = report.images
    if images is not None:
        if images.ok:
            lines.append(_row("images", f"accepted: {clip(images.text)!r}"))
        else:
            verdict = "REFUSED" if report.accepts_images is False else "FAILED"
            lines.append(_row("images", f"{verdict}: {images.error}"))
    fields = report.reasoning_fields
    lines.append(_row("reasoning", ", ".join(fields) if fields else "none seen"))
    if not tools.ok:
        lines.append(_row("tool calling", f"FAILED: {tools.error}"))
    elif not tools.tool_calls:
        lines.append(
            _row(
                "tool calling",
                f"FAILED: no tool call (finish_reason {tools.finish_reason}, "
                f"text {clip(tools.text)!r})",
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
