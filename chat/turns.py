"""The conversation page's turns: each user message with the run that answered it.

The page renders them from the database, and the run publisher re-renders a finished turn with
the same partials, so a reload shows what the live stream showed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Q
from django.utils import timezone

from chat.models import Annotation, Conversation, Message, ModelCall, Run, ToolCall
from chat.models.runs import ACTIVE
from chat.rendering import markdown
from chat.tool_progress import RunningCall, running_call
from chat.transcripts import versions

PAGE_TEXT_CHARS = 50_000
"""The page shows a message's first PAGE_TEXT_CHARS characters and links to the rest: a 40 MB
message made a page no browser finished loading. Above the default limit on a user message, so a
typed message is never folded."""
BUBBLE_CHARS = 1_500


@dataclass
class Turn:
    """One user message and the agent's reply to it (every assistant message of its run)."""

    user: Message | None
    run: Run | None = None
    replies: list[Message] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    model_calls: list[ModelCall] = field(default_factory=list)
    point: versions.Point | None = None
    """The versions at this turn's start, when it has more than one."""
    annotations: list[Annotation] = field(default_factory=list)
    """The team's annotations of the reply and of its tool calls, with their authors."""
    indexes: list[int] = field(default_factory=list)
    """The indexes of its messages on the active path: a link to any of them lands here."""

    @property
    def anchors(self) -> list[int]:
        """The indexes a link may name that no bubble of the turn carries (`#message-N`)."""
        user = self.user.index if self.user is not None else None
        return [index for index in self.indexes if index != user]

    @property
    def start(self) -> Message | None:
        """The message a new version of this turn starts at (see versions.start_of)."""
        return self.user or (self.replies[0] if self.replies else None)

    @property
    def key(self) -> str:
        if self.run is not None:
            return str(self.run.pk)
        anchor = self.user or (self.replies[0] if self.replies else None)
        return f"m{anchor.pk}" if anchor is not None else "none"

    @property
    def text(self) -> str:
        return "\n\n".join(m.content for m in self.replies if m.content)

    @property
    def html(self) -> str:
        """The reply as the page shows it: its first PAGE_TEXT_CHARS characters."""
        return markdown(self.text[:PAGE_TEXT_CHARS])

    @property
    def folded_replies(self) -> list[Message]:
        """Replies the page shows only the start of, or none of: each gets a link to its text."""
        folded, end = [], 0
        for message in self.replies:
            if message.content:
                end += len(message.content)
                if end > PAGE_TEXT_CHARS:
                    folded.append(message)
                end += 2
        return folded

    @property
    def user_text(self) -> str:
        return (self.user.content or "")[:PAGE_TEXT_CHARS] if self.user else ""

    @property
    def user_folded(self) -> bool:
        return self.user is not None and len(self.user.content or "") > PAGE_TEXT_CHARS

    @property
    def user_scrolls(self) -> bool:
        """A long paste scrolls inside its bubble instead of pushing the reply screens away."""
        return self.user is not None and len(self.user.content or "") > BUBBLE_CHARS

    @property
    def reasoning(self) -> str:
        return "\n\n".join(m.reasoning for m in self.replies if m.reasoning)

    @property
    def is_active(self) -> bool:
        return self.run is not None and self.run.is_active

    @property
    def looking_up(self) -> list[RunningCall]:
        """The calls under way as the "Looking up" line names them when the page is drawn (a
        call waiting for a decision has not started); the socket's snapshot follows."""
        now = timezone.now()
        return [
            running_call(call.name, call.started_at, None, now)
            for call in self.tool_calls
            if call.is_active and call.started_at is not None
        ]

    @property
    def timeline(self) -> list[tuple[int, ModelCall | None, list[ToolCall]]]:
        """Per loop step: its model call and its tool calls, for the footer."""
        steps: dict[int, tuple[ModelCall | None, list[ToolCall]]] = {
            call.step: (call, []) for call in self.model_calls
        }
        for call in self.tool_calls:
            steps.setdefault(call.step, (None, []))[1].append(call)
        return [(number, *steps[number]) for number in sorted(steps)]


WINDOW = 50
"""About how many messages of a conversation a page shows at once: a page costs what it shows,
not the conversation's length."""

LONGEST_TURN = 10 * WINDOW
"""How far back a window looks for the question of the turn it would cut: a longer turn (or a
stretch without questions, as an imported agent log may be) is cut where the window ends."""


@dataclass(frozen=True)
class Window:
    """A stretch of the active path by message index, `start` included, `end` excluded (None:
    up to the latest). It starts at a user message (or the path's start), so a turn is never
    split: every turn starts at a user message or inside the stretch one opens."""

    start: int
    end: int | None = None

    @property
    def latest(self) -> bool:
        return self.end is None

    @property
    def earlier(self) -> bool:
        """Whether messages come before it (the path starts at index 0)."""
        return self.start > 0

    def rows(self, conversation: Conversation) -> list[Message]:
        rows = conversation.messages.active().filter(index__gte=self.start)
        return list(rows if self.end is None else rows.filter(index__lt=self.end))


def window_before(conversation: Conversation, before: int | None = None) -> Window:
    """The last WINDOW or so messages before message `before` (the latest, without it): from
    the first user message among them, or back to the user message of a turn longer than the
    window (one query: the roles of up to LONGEST_TURN messages, not their rows)."""
    rows = conversation.messages.active().order_by("-index")
    if before is not None:
        rows = rows.filter(index__lt=before)
    last = list(rows.values_list("index", "role")[: LONGEST_TURN + 1])
    if len(last) <= WINDOW:
        return Window(0, before)
    users = [index for index, role in last if role == Message.Role.USER]
    within = [index for index in users if index >= last[WINDOW - 1][0]]
    if within or users:
        return Window(min(within) if within else max(users), before)
    if len(last) <= LONGEST_TURN:
        return Window(0, before)  # no question since the path's start: one turn
    return Window(last[WINDOW - 1][0], before)  # a turn longer than LONGEST_TURN: cut


def window_at(conversation: Conversation, index: int) -> Window:
    """The window a link to message `index` opens: from the user message of its turn, WINDOW
    or so messages on, to the next user message (the latest window when that is near)."""
    start = _turn_start(conversation, index)
    ahead = list(
        conversation.messages.active()
        .filter(index__gte=start)
        .values_list("index", "role")[: 2 * WINDOW + 1]
    )
    if len(ahead) <= 2 * WINDOW:
        return Window(start)  # within two windows of the latest: show it all
    later = [i for i, role in ahead[WINDOW:] if role == Message.Role.USER]
    sooner = [i for i, role in ahead[1:WINDOW] if role == Message.Role.USER]
    if later or sooner:
        return Window(start, later[0] if later else sooner[-1])
    last = ahead[-1][0]
    rows = conversation.messages.active()
    after = (
        rows.filter(index__gt=last, index__lte=last + LONGEST_TURN, role=Message.Role.USER)
        .values_list("index", flat=True)
        .first()
    )
    if after is not None:
        return Window(start, after)
    if rows.filter(index__gt=last + LONGEST_TURN).exists():
        return Window(start, ahead[WINDOW][0])  # a turn longer than LONGEST_TURN: cut
    return Window(start)


def _turn_start(conversation: Conversation, index: int) -> int:
    """The index of the last user message at or before `index`, within LONGEST_TURN: 0 when
    none is and that reaches the path's start, else `index` itself."""
    floor = max(0, index - LONGEST_TURN)
    found = (
        conversation.messages.active()
        .filter(index__lte=index, index__gte=floor, role=Message.Role.USER)
        .order_by("-index")
        .values_list("index", flat=True)
        .first()
    )
    if found is not None:
        return found
    return 0 if floor == 0 else index


def conversation_turns(conversation: Conversation, window: Window | None = None) -> list[Turn]:
    """The conversation (or the window of it) as turns, in six queries whatever its length:
    each reads only the rows of the window's messages and runs."""
    window = window or Window(0)
    rows = window.rows(conversation)
    shown_runs = Q(pk__in={row.run_id for row in rows if row.run_id is not None})
    if window.latest:  # a run that has written nothing yet (a fork continuing) still streams
        shown_runs |= Q(status__in=ACTIVE)
    runs = {run.pk: run for run in conversation.runs.filter(shown_runs)}
    calls: dict[int, list[ToolCall]] = {}
    for call in (
        ToolCall.objects.filter(run__in=list(runs))
        .defer("raw_result")  # megabytes of media, read by a call's details alone
        .order_by("step", "position", "pk")
    ):
        calls.setdefault(call.run_id, []).append(call)
    model_calls: dict[int, list[ModelCall]] = {}
    for model_call in (
        ModelCall.objects.filter(run__in=list(runs)).without_payloads().order_by("step")
    ):
        model_calls.setdefault(model_call.run_id, []).append(model_call)
    annotations: dict[int, list[Annotation]] = {}
    for annotation in Annotation.objects.filter(run__in=list(runs)).select_related("author"):
        annotations.setdefault(annotation.run_id, []).append(annotation)

    def turn(user: Message | None, run: Run | None) -> Turn:
        if run is None:
            return Turn(user=user)
        return Turn(
            user,
            run,
            [],
            calls.get(run.pk, []),
            model_calls.get(run.pk, []),
            annotations=annotations.get(run.pk, []),
        )

    turns: list[Turn] = []
    marks = versions.points(conversation, window.start, window.end)
    for message in rows:
        run = runs.get(message.run_id) if message.run_id else None
        if message.role == "user":
            turns.append(turn(message, run))
        elif message.role == "assistant":
            if not turns or (turns[-1].run is not run and run is not None):
                turns.append(turn(None, run))
            turns[-1].replies.append(message)
        if turns:
            turns[-1].indexes.append(message.index)
    shown = {t.run.pk for t in turns if t.run is not None}
    turns.extend(turn(None, run) for run in runs.values() if run.is_active and run.pk not in shown)
    for each in turns:
        if each.start is not None:
            each.point = marks.get(each.start.index)
    return turns


def turn_for_run(run: Run) -> Turn:
    run = Run.objects.select_related("conversation").get(pk=run.pk)
    messages = list(run.messages.order_by("index"))
    user = next((m for m in messages if m.role == "user"), None)
    turn = Turn(
        user=user,
        run=run,
        replies=[m for m in messages if m.role == "assistant"],
        tool_calls=list(run.tool_calls.order_by("step", "position", "pk")),
        model_calls=list(run.model_calls.without_payloads().order_by("step")),
        annotations=list(Annotation.objects.filter(run=run).select_related("author")),
    )
    if turn.start is not None and turn.start.version_id is None:
        at = turn.start.index
        turn.point = versions.points(run.conversation, at, at + 1).get(at)
    return turn
