"""A conversation as the admin shows it: messages in order, runs and tool-call logs attached,
where versions exist, and each archived version's own messages."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from django.db.models import Prefetch, Q
from django.utils.safestring import SafeString

from chat import agent, media, waterfall
from chat.media import Shown
from chat.models import Conversation, Message, ModelCall, Run, ToolCall, Version
from chat.templatetags.chat_tags import pill as render_pill
from chat.templatetags.chat_tags import pretty
from chat.transcripts import versions
from chat.turns import WINDOW, Window

from .base import pill


@dataclass
class CallView:
    """One requested tool call on an assistant message, with its execution log if any."""

    call: agent.ToolCall
    log: ToolCall | None
    media: list[Shown] = field(default_factory=list)

    @property
    def pill(self) -> SafeString:
        if self.log is not None:
            return pill(self.log)
        return SafeString(render_pill(self.call.name))

    @property
    def server(self) -> str:
        """The MCP server that executed the call; empty for a built-in tool (or no log)."""
        return self.log.server if self.log is not None else ""

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
    tool_calls: list[ToolCall] = field(default_factory=list)

    @property
    def waterfall(self) -> SafeString:
        """The run's model and tool calls on one time axis (from rows already loaded)."""
        return waterfall.picture(
            self.run, self.run.model_calls.all(), self.tool_calls, self.run.leases.all()
        )


@dataclass
class Entry:
    message: Message
    run: RunView | None = None
    calls: list[CallView] = field(default_factory=list)
    answers: CallView | None = None
    point: versions.Point | None = None

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
class VersionView:
    """An archived version: its own messages, after its parent's (or the active path's) before
    `version.index`."""

    version: Version
    parent: Version | None
    entries: list[Entry]
    parent_shown: bool = True
    """Whether the parent is on this page too; if not, its link opens the window it is in."""


@dataclass
class Transcript:
    entries: list[Entry]
    runs_without_messages: list[RunView]
    tool_calls: int
    versions: list[VersionView] = field(default_factory=list)
    window: Window = field(default_factory=lambda: Window(0))
    messages: int = 0
    """Messages on the whole active path (the window shows some of them)."""
    archived_cut: bool = False
    """Whether the window's archived versions hold more messages than the page shows."""

    @property
    def last(self) -> int | None:
        """The index of the window's last message."""
        return self.entries[-1].message.index if self.entries else None


ARCHIVED_ROWS = 4 * WINDOW
"""The archived versions' messages a page shows at most, beside the window's own."""


def transcript(conversation: Conversation, window: Window | None = None) -> Transcript:
    """A window of the active path in order (all of it without one), runs and tool-call logs
    attached, then the archived versions that branch off inside it: a dozen queries whatever
    the conversation's length.

    A run's header comes with its first message shown, on the active path or else in a version.
    """
    window = window or Window(0)
    active = window.rows(conversation)
    branches = conversation.versions.filter(index__gte=window.start).select_related("parent")
    if window.end is not None:
        branches = branches.filter(index__lt=window.end)
    archived = list(branches.order_by("index", "number", "pk"))
    own: dict[int, list[Message]] = {}
    archived_rows: list[Message] = []
    if archived:
        rows = Message.objects.filter(version__in=archived).order_by("version", "index")
        archived_rows = list(rows[: ARCHIVED_ROWS + 1])
    for row in archived_rows[:ARCHIVED_ROWS]:
        own.setdefault(row.version_id or 0, []).append(row)
    paths = [versions.Path(None, active)] + [versions.Path(v, own.get(v.pk, [])) for v in archived]
    points = versions.points_of((v.index, v.number) for v in archived if v.parent_id is None)
    shown_runs = Q(pk__in={row.run_id for path in paths for row in path.messages if row.run_id})
    if window.latest:
        shown_runs |= Q(messages=None)
    runs = list(
        conversation.runs.filter(shown_runs)
        .distinct()
        .select_related("created_by")
        .prefetch_related(
            Prefetch("model_calls", queryset=ModelCall.objects.order_by("step")), "leases"
        )
        .order_by("started_at", "id")
    )
    logs = list(
        ToolCall.objects.filter(run__in=runs)
        .select_related("decided_by")
        .defer("raw_result")  # megabytes of media; a call's own page shows it
        .order_by("step", "position", "id")
    )
    by_message = {(log.message_id, log.call_id): log for log in logs}
    shown = media.calls_with_media(logs)
    message_ids = {message.pk for path in paths for message in path.messages}
    views = {run.pk: RunView(run) for run in runs}
    for log in logs:
        views[log.run_id].tool_calls.append(log)
        if log.message_id is None or log.message_id not in message_ids:
            views[log.run_id].unlinked.append(log)
    sections = _Sections(views, by_message, shown)
    entries = sections.entries(paths[0])
    for entry in entries:
        entry.point = points.get(entry.message.index)
    on_page = {version.pk for version in archived}
    listed = [
        VersionView(
            p.version,
            p.version.parent,
            sections.entries(p),
            p.version.parent_id is None or p.version.parent_id in on_page,
        )
        for p in paths[1:]
        if p.version
    ]
    unshown = [view for pk, view in views.items() if pk not in sections.shown]
    calls = ToolCall.objects.filter(run__conversation=conversation).count()
    return Transcript(
        entries,
        unshown,
        calls,
        listed,
        window,
        conversation.messages.active().count(),
        len(archived_rows) > ARCHIVED_ROWS,
    )


@dataclass
class _Sections:
    """Entries of one path after another; each run's header comes once, with its first entry."""

    views: dict[int, RunView]
    by_message: dict[tuple[int | None, str], ToolCall]
    media: dict[int, list[Shown]]
    shown: set[int] = field(default_factory=set)

    def entries(self, path: versions.Path) -> list[Entry]:
        """The path's own messages (an archived version's, or the whole active path); a tool
        reply answers a call of the whole path."""
        own = path.version.pk if path.version is not None else None
        entries = []
        asked: dict[str, CallView] = {}
        for message in path.messages:
            entry = Entry(message)
            for value in message.tool_calls or ():
                call = agent.ToolCall.from_openai(value)
                log = self.by_message.get((message.pk, call.id))
                view = CallView(call, log, self.media.get(log.pk, []) if log else [])
                entry.calls.append(view)
                asked[call.id] = view
            if message.version_id != own:
                continue
            if message.run_id in self.views and message.run_id not in self.shown:
                self.shown.add(message.run_id)
                entry.run = self.views[message.run_id]
            if message.role == Message.Role.TOOL:
                entry.answers = asked.get(message.tool_call_id) or CallView(
                    agent.ToolCall(id=message.tool_call_id, name="unknown tool"), None
                )
            entries.append(entry)
        return entries
