"""The chat page's side of tool calls that wait for a person (the decisions are
`chat.runs.approvals`): the waiting card of a reply, the frames a decision or a Stop sends to
every tab, and the sidebar mark on each of the owner's pages.

The owner's sockets, on whichever conversation, join the owner's group (`user_group`): a run
that starts or stops waiting marks its conversation in the sidebar of every page they have
open.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from channels.db import database_sync_to_async
from django.template.loader import render_to_string
from django.utils.html import format_html
from django.utils.safestring import SafeString

from chat import news as chat_news
from chat.fragments import announce, broadcast, ended_text, render
from chat.models import Approval, Conversation, Run, ToolCall
from chat.runs import approvals
from chat.templatetags.chat_tags import pretty
from chat.turns import Turn, turn_for_run

TEMPLATE = "chat/waiting.html"
TITLE = "Waiting for your approval"
DONE: dict[str, str] = {
    Approval.APPROVED: "Approved",
    Approval.ALWAYS: "Always allowed",
    Approval.EDITED: "Edited and approved",
    Approval.DENIED: "Denied",
}
"""A decision as the line read to screen readers names it."""
MARK = '<span class="waiting-mark" title="{}">{}<span class="visually-hidden">{}: </span></span>'
LINK_INSIDE = '<a id="conversation-link-{}" hx-swap-oob="innerHTML">{}</a>'
"""A sidebar link's new inside: its marks (or none) and title, the link itself left as it is
(where it points, whether it is the page's)."""
MARK_ICON = SafeString(
    '<svg class="icon" viewBox="0 0 16 16" width="10" height="10" aria-hidden="true" '
    'focusable="false"><circle cx="8" cy="8" r="6" fill="currentColor"/></svg>'
)


def user_group(user_id: int) -> str:
    """The channel layer group of one person's conversation pages, whatever they show."""
    return f"user.{user_id}"


def source(call: ToolCall) -> str:
    """Where a tool lives, as the card says it: built in, or its MCP server."""
    return f"MCP server {call.server}" if call.server else "built-in tool"


@dataclass
class Card:
    """One waiting call as its card shows it: the arguments as readable JSON."""

    call: ToolCall
    source: str
    arguments: str

    @property
    def rows(self) -> int:
        """The edit box's height: the arguments' lines, within reason."""
        return min(max(self.arguments.count("\n") + 1, 3), 14)


@dataclass
class Waiting:
    """The calls of a waiting turn: those that wait (`cards`), those decided already that run or
    are answered once the rest are (`decided`), and those that need no decision and run then
    (`queued`)."""

    run: Run
    cards: list[Card] = field(default_factory=list)
    decided: list[ToolCall] = field(default_factory=list)
    queued: list[ToolCall] = field(default_factory=list)

    @property
    def several(self) -> bool:
        return len(self.cards) > 1

    @property
    def names(self) -> str:
        return ", ".join(dict.fromkeys(card.call.display_name for card in self.cards))


def waiting(turn: Turn) -> Waiting | None:
    """What the turn's reply shows of its waiting calls; None when its run does not wait."""
    run = turn.run
    if run is None or not run.is_waiting:
        return None
    shown = Waiting(run)
    for call in turn.tool_calls:
        if call.is_waiting:
            arguments = pretty(call.arguments) or "{}"
            shown.cards.append(Card(call, source(call), arguments))
        elif call.is_active and call.approval:
            shown.decided.append(call)
        elif call.is_active:
            shown.queued.append(call)
    return shown


def waiting_tools(turns: Iterable[Turn]) -> str:
    """The tools whose calls wait in these turns, by display name ("" when none waits)."""
    return next((shown.names for turn in turns if (shown := waiting(turn))), "")


def run_state(turn: Turn) -> str:
    """The page's run state after `turn`: running, waiting (naming the tools) or neither."""
    shown = waiting(turn)
    return render(
        "run-state",
        {"running": turn.is_active, "waiting": shown.names if shown else ""},
    )


def mark(waits: bool) -> SafeString:
    """A conversation's mark in the sidebar while one of its runs waits for its owner; nothing
    otherwise (built here, not from a template: the sidebar has one line per conversation)."""
    return format_html(MARK, TITLE, MARK_ICON, TITLE) if waits else SafeString("")


def marks(*, waits: bool, news: bool) -> SafeString:
    """A sidebar line's marks, waiting for its owner first, then news for them: the one place
    they are put together, for a line, a search hit and a live frame."""
    if not (waits or news):
        return SafeString("")
    return SafeString(mark(waits) + chat_news.mark(news))


def inside(conversation: Conversation, *, waits: bool, news: bool) -> SafeString:
    """A sidebar link's inside: its marks and its title."""
    return format_html("{}{}", marks(waits=waits, news=news), conversation)


async def tell_owner(conversation: Conversation, waits: bool, *, news: bool | None = None) -> None:
    """Mark (or unmark) the conversation in the sidebar of every page its owner has open: as
    waiting, and as news (read from the rows when not given). The title is read again: the
    link's inside is replaced whole."""
    await conversation.arefresh_from_db(fields=["title"])
    if news is None:
        news = await database_sync_to_async(chat_news.news_of)(conversation)
    html = format_html(LINK_INSIDE, conversation.pk, inside(conversation, waits=waits, news=news))
    await broadcast(user_group(conversation.owner_id), html)


async def started(turn: Turn) -> str:
    """The frame of a run that has just started waiting: its reply with the waiting calls, the
    page's state, and a line for screen readers naming the tools. Its owner's other pages mark
    the conversation."""
    assert turn.run is not None
    await tell_owner(turn.run.conversation, True)
    return (
        render("reply", {"turn": turn, "oob": True})
        + run_state(turn)
        + announce(f"{TITLE}: {waiting_tools([turn])}")
    )


def decided(outcome: approvals.Decided) -> str:
    """The frame every tab gets after a decision: the turn as it is now (the remaining waiting
    calls; once none waits, the reply going on) and a line saying what was decided."""
    turn = turn_for_run(outcome.run)
    partial = "live-reply" if turn.is_active else "reply"
    names = ", ".join(dict.fromkeys(call.display_name for call in outcome.calls))
    verdict = DONE.get(outcome.calls[0].approval, "Decided") if outcome.calls else "Decided"
    return (
        render(partial, {"turn": turn, "oob": True})
        + run_state(turn)
        + announce(f"{verdict}: {names}.")
        + render("notice", {})
    )


def stopped(run: Run) -> str:
    """The frame every tab gets when Stop ended a waiting run."""
    turn = turn_for_run(run)
    return (
        render("reply", {"turn": turn, "oob": True})
        + run_state(turn)
        + announce(ended_text("reply", run.status))
    )


def refused(call: int | None, text: str) -> str:
    """A refused edit, shown under its box (for the socket that sent it only: the box keeps
    the text that was refused)."""
    if call is None:
        return ""
    return render_to_string(f"{TEMPLATE}#error", {"pk": call, "error": text, "oob": True})
