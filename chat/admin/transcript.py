"""A conversation as the admin shows it: messages in order, runs and tool-call logs attached."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from django.db.models import Prefetch
from django.utils.safestring import SafeString

from chat import agent
from chat.models import Conversation, Message, ModelCall, Run, ToolCall
from chat.templatetags.chat_tags import pill as render_pill
from chat.templatetags.chat_tags import pretty

from .base import pill


@dataclass
class CallView:
    """One requested tool call on an assistant message, with its execution log if any."""

    call: agent.ToolCall
    log: ToolCall | None

    @property
    def pill(self) -> SafeString:
        if self.log is not None:
            return pill(self.log)
        return SafeString(render_pill(self.call.name))

    @property
    def arguments(self) -> str:
        return pretty(self.call.arguments)

    @property
    def arguments_valid(self) -> bool:
        """Whether the raw arguments parse; the model's text is shown either way."""
        text = self.call.arguments.strip()
        if not text:
            return True
        try:
            json.loads(text)
        except ValueError:
            return False
        return True


@dataclass
class RunView:
    run: Run
    unlinked: list[ToolCall] = field(default_factory=list)


@dataclass
class Entry:
    message: Message
    run: RunView | None = None
    calls: list[CallView] = field(default_factory=list)
    answers: CallView | None = None

    @property
    def empty_content(self) -> str:
        """`null` or `""` when there is no text: the two differ on the wire."""
        if self.message.content is None:
            return "null"
        return '""' if self.message.content == "" else ""

    @property
    def content(self) -> str:
        if self.message.role == Message.Role.TOOL:
            return pretty(self.message.content)
        return self.message.content or ""


@dataclass
class Transcript:
    entries: list[Entry]
    runs_without_messages: list[RunView]
    tool_calls: int


def transcript(conversation: Conversation) -> Transcript:
    """The conversation in order, runs and tool-call logs attached: four queries in all."""
    messages = list(conversation.messages.active())
    runs = list(
        conversation.runs.select_related("created_by")
        .prefetch_related(Prefetch("model_calls", queryset=ModelCall.objects.order_by("step")))
        .order_by("started_at", "id")
    )
    logs = list(
        ToolCall.objects.filter(run__conversation=conversation).order_by("step", "position", "id")
    )
    by_message = {(log.message_id, log.call_id): log for log in logs}
    message_ids = {message.pk for message in messages}
    views = {run.pk: RunView(run) for run in runs}
    for log in logs:
        if log.message_id is None or log.message_id not in message_ids:
            views[log.run_id].unlinked.append(log)
    entries = []
    shown: set[int] = set()
    asked: dict[str, CallView] = {}
    for message in messages:
        entry = Entry(message)
        if message.run_id in views and message.run_id not in shown:
            shown.add(message.run_id)
            entry.run = views[message.run_id]
        for value in message.tool_calls or ():
            call = agent.ToolCall.from_openai(value)
            view = CallView(call, by_message.get((message.pk, call.id)))
            entry.calls.append(view)
            asked[call.id] = view
        if message.role == Message.Role.TOOL:
            entry.answers = asked.get(message.tool_call_id) or CallView(
                agent.ToolCall(id=message.tool_call_id, name="unknown tool"), None
            )
        entries.append(entry)
    unshown = [view for pk, view in views.items() if pk not in shown]
    return Transcript(entries, unshown, len(logs))
