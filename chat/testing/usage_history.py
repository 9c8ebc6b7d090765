"""Histories for the Usage page's tests: a small crafted one whose every figure is known, and a
busy one as large as asked (rows written in bulk, days spread over a period)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from chat import agents
from chat.models import Conversation, Purpose, Run, ToolCall
from chat.prices import Price
from chat.testing import factories as make

FIRST = date(2026, 3, 1)
LAST = date(2026, 3, 3)
PRICES = {
    "gpt-a": Price(prompt=Decimal(1), completion=Decimal(2)),
    "gpt-b": Price(prompt=Decimal(10), completion=Decimal(20)),
}


def at(day: date, hour: int = 12, minute: int = 0, second: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, second, tzinfo=UTC)


def run(
    conversation: Conversation,
    when: datetime,
    *,
    status: str = "completed",
    model: str = "gpt-a",
    tokens: tuple[int, int] = (0, 0),
    duration: float | None = None,
    user: Any = None,
) -> Run:
    made = Run.objects.create(
        conversation=conversation,
        status=status,
        model=model,
        prompt_tokens=tokens[0],
        completion_tokens=tokens[1],
        total_tokens=sum(tokens),
        duration=duration,
        created_by=user,
    )
    Run.objects.filter(pk=made.pk).update(started_at=when)  # started_at is set on creation
    made.refresh_from_db()
    return made


def call(
    owner: Run,
    name: str,
    *,
    status: str = "completed",
    failure: str = "",
    duration: float | None = None,
    server: str = "",
) -> ToolCall:
    return ToolCall.objects.create(
        run=owner,
        call_id=f"call-{ToolCall.objects.count()}",
        name=name,
        status=status,
        failure=failure,
        duration=duration,
        server=server,
        started_at=owner.started_at,
    )


@dataclass
class Crafted:
    runs: dict[str, Run]
    ada: Any
    bob: Any


def crafted() -> Crafted:
    """Five runs in the three days from FIRST to LAST (none on the second day), two just
    outside; four chats and one evaluation's replay; two failed (one of them interrupted);
    five tool calls, two of them errors, one denied by a person, one cancelled.

    day 1: A chat gpt-a completed 1000+200 tokens 1.0 s (ada, Support v1)
             tool calls: search_cards completed 0.1 s, search_cards failed 0.2 s,
                         handoff_note denied
           B chat gpt-a failed 500+0 2.0 s (ada, Support v1)
           C eval gpt-b completed 3000+300 4.0 s (bob, Support v1)
             tool call: docs__search_docs on docs, timed out 5.0 s
    day 3: D chat scripted interrupted 10+5 3.0 s (bob, Default)
           E chat gpt-a cancelled 100+50 0.5 s (ada, Default)
             tool call: get_current_time cancelled
    """
    ada, bob = make.user("ada"), make.user("bob")
    chat = make.conversation(ada, "with Support")
    agents.create_agent(name="Support", conversation=chat, user=ada)
    chat.refresh_from_db()
    replay = Conversation.objects.create(
        owner=bob, purpose=Purpose.EVAL, agent_version=chat.agent_version
    )
    plain_bob, plain_ada = make.conversation(bob), make.conversation(ada)
    day1, day3 = FIRST, LAST
    made = {
        "A": run(chat, at(day1, 9), tokens=(1000, 200), duration=1.0, user=ada),
        "B": run(chat, at(day1, 10), status="failed", tokens=(500, 0), duration=2.0, user=ada),
        "C": run(replay, at(day1, 23, 59, 59), model="gpt-b", tokens=(3000, 300), duration=4.0),
        "D": run(plain_bob, at(day3, 0), status="interrupted", model="scripted", tokens=(10, 5)),
        "E": run(
            plain_ada, at(day3, 8), status="cancelled", tokens=(100, 50), duration=0.5, user=ada
        ),
        "before": run(plain_ada, at(day1, 0) - timedelta(seconds=1), tokens=(7, 7), duration=9),
        "after": run(plain_ada, at(day3 + timedelta(days=1), 0), tokens=(7, 7), duration=9),
    }
    Run.objects.filter(pk=made["C"].pk).update(created_by=bob)
    Run.objects.filter(pk=made["D"].pk).update(created_by=bob, duration=3.0)
    call(made["A"], "search_cards", duration=0.1)
    call(made["A"], "search_cards", status="failed", failure="tool_error", duration=0.2)
    call(made["A"], "handoff_note", status="failed", failure="denied")
    call(
        made["C"],
        "docs__search_docs",
        status="failed",
        failure="timeout",
        duration=5.0,
        server="docs",
    )
    call(made["E"], "get_current_time", status="cancelled")
    call(made["before"], "search_cards", status="failed", failure="tool_error", duration=9)
    return Crafted({key: Run.objects.get(pk=value.pk) for key, value in made.items()}, ada, bob)


def busy(runs: int, *, first: date, days: int, seed: int = 7) -> None:
    """`runs` runs spread over `days` days from `first`, a tenth of them evaluations' replays,
    each with two tool calls; written in bulk (a query per 2,000 rows)."""
    chance = random.Random(seed)
    owner = make.user("busy")
    chat = make.conversation(owner)
    replay = Conversation.objects.create(owner=owner, purpose=Purpose.EVAL)
    rows, times = [], []
    for n in range(runs):
        times.append(at(first, 0) + timedelta(seconds=chance.randrange(days * 86_400)))
        prompt, completion = chance.randrange(5_000), chance.randrange(800)
        rows.append(
            Run(
                conversation=replay if n % 10 == 0 else chat,
                status=chance.choice(["completed"] * 18 + ["failed", "cancelled"]),
                model=chance.choice(["gpt-a", "gpt-b", "scripted"]),
                prompt_tokens=prompt,
                completion_tokens=completion,
                total_tokens=prompt + completion,
                duration=chance.uniform(0.2, 30),
                created_by=owner,
            )
        )
    for row, when in zip(rows, times, strict=True):
        row.started_at = when
    stamp = Run._meta.get_field("started_at")
    stamp.auto_now_add = False  # keep the times given, this once
    try:
        made = Run.objects.bulk_create(rows, batch_size=2_000)
    finally:
        stamp.auto_now_add = True
    ToolCall.objects.bulk_create(
        [
            ToolCall(
                run=row,
                call_id=f"c{row.pk}-{k}",
                name=chance.choice(["search_cards", "get_current_time", "docs__search_docs"]),
                status="failed" if chance.random() < 0.05 else "completed",
                duration=chance.uniform(0.01, 3),
            )
            for row in made
            for k in range(2)
        ],
        batch_size=2_000,
    )
