"""A deploy or a crash interrupts nothing, on two daphne processes sharing PostgreSQL and Redis.

A rolling deploy (SIGTERM each process in turn, start it again) and a kill -9 in the middle of
dozens of runs: every run completes, no tool call executes twice (the tools write each execution
down, tests/scaleout/rolling_tools.py), only the turn that was streaming is asked of the provider
again, and the clients, reconnecting to the other process, see every run end with its whole
reply. Real processes and signals, the strict fake provider over HTTP, real WebSockets.
"""

from __future__ import annotations

import asyncio
import json
import signal
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from chat.testing.openai_server import FakeOpenAIServer
from chat.testing.rolling import Fleet, Followed, follow
from chat.testing.site import Site, postgres_site
from tests.scaleout.conftest import POSTGRES, REDIS
from tests.scaleout.deploys import (
    SITE_ENV,
    TURNS,
    Provider,
    assert_clients_saw_the_end,
    assert_each_tool_call_executed_once,
    assert_whole_replies,
    conversations,
    executions,
    handovers,
    lease_rows,
    prompt,
    reply,
    where,
)

pytestmark = [pytest.mark.scaleout, pytest.mark.slow]


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    with FakeOpenAIServer() as fake:
        yield Provider(fake)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with postgres_site(POSTGRES, REDIS, env=SITE_ENV) as made:
        yield made


@pytest.fixture(scope="module")
def both(site: Site) -> Iterator[Fleet]:
    with site.daphne() as a, site.daphne() as b:
        yield Fleet([a, b])


@pytest.fixture
def fleet(both: Fleet) -> Fleet:
    """Both processes serving (a test may have left one down)."""
    for server in both.servers:
        if server.process is None or server.process.poll() is not None:
            both.start(server)
    return both


def test_a_rolling_deploy_interrupts_no_run_and_repeats_no_tool_call(
    site: Site, provider: Provider, fleet: Fleet
) -> None:
    """40 runs, 20 through each process, each a round of tool calls and then a reply streamed
    over 14 s; while they stream, SIGTERM A, start it again, then SIGTERM B, start it again.
    A's runs go on on B (then on A again), B's on A."""
    session, ids = conversations(site, provider, "ada", 40)
    a, b = fleet.servers
    through_a = ids[0::2]
    provider.words, provider.chunk_seconds = 100, 0.2

    async def scenario() -> tuple[list[Followed], Any]:
        followers = [
            asyncio.create_task(follow(fleet, (a, b)[n % 2], session, c, prompt(c), limit=150))
            for n, c in enumerate(ids)
        ]
        await provider.until_streaming(ids)
        await asyncio.sleep(1)
        restarts = await asyncio.to_thread(fleet.roll)
        return list(await asyncio.gather(*followers)), restarts

    started = time.monotonic()
    followed, restarts = asyncio.run(scenario())
    took = time.monotonic() - started

    columns = "conversation_id, status, error, resumes"
    runs = site.sql(f"select {columns} from chat_run where {where(ids)}")
    assert sorted(str(status) for _, status, _, _ in runs) == ["completed"] * len(ids)
    assert all(error == "" for _, _, error, _ in runs)
    resumes = {int(str(c)): int(str(n)) for c, _, _, n in runs}
    # Each process was stopped while the runs it held streamed: let go, resumed elsewhere. A's
    # go on on B, and on A again when B stops (unless A, restarted, claimed them first).
    assert {c: resumes[c] in (1, 2) if c in through_a else resumes[c] for c in ids} == {
        c: True if c in through_a else 1 for c in ids
    }
    assert_whole_replies(site, provider, ids)
    assert_each_tool_call_executed_once(site, ids)
    assert_clients_saw_the_end(followed, provider, fleet, session)

    requests = provider.requests()
    for c in ids:  # a resume asks again for the reply that was streaming (at most), no more
        tool_round, *replies = requests[c]
        assert tool_round[-1]["role"] == "user"
        assert replies == [replies[0]] * len(replies) and len(replies) <= 1 + resumes[c]
    extra = sum(len(requests[c]) for c in ids) - TURNS * len(ids)
    leases = lease_rows(site, ids)
    outcomes = Counter(outcome for held in leases.values() for _, outcome, _, _ in held)
    # A SIGTERM lets go of every run, even one its sweeper had just claimed: none expires.
    expired = {c: held for c, held in leases.items() if any(o == "expired" for _, o, _, _ in held)}
    said = [line for server in fleet.servers for line in server.log.read_text().splitlines()]
    assert expired == {}, "\n".join([str(expired), *(line for line in said if "WARNING" in line)])
    assert outcomes["finished"] == len(ids)
    gaps = handovers(leases)
    assert max(gaps) < 10  # sooner than a lease (10 s) expires: let go, not left to expire
    for server in fleet.servers:
        assert server.errors() == []
    print(
        f"\nrolling deploy: {len(ids)} runs completed in {took:.1f} s, 0 interrupted; "
        f"{sum(1 for n in resumes.values() if n)} resumed ({sum(resumes.values())} resumptions); "
        f"provider requests {TURNS * len(ids) + extra} for {TURNS * len(ids)} turns "
        f"(+{extra}); handover p50 {statistics.median(gaps):.2f} s, max {max(gaps):.2f} s; "
        f"sockets per client max {max(seen.sockets for seen in followed)}; restarts "
        + ", ".join(f"stop {r.stop_seconds:.1f} s start {r.start_seconds:.1f} s" for r in restarts)
    )


def test_a_killed_process_s_runs_resume_on_the_other_and_complete(
    site: Site, provider: Provider, fleet: Fleet
) -> None:
    """kill -9 of B in the middle of 20 replies: the runs it held are claimed by A within the
    lease's bound and complete there; of their turns only the streaming one is asked twice."""
    session, ids = conversations(site, provider, "grace", 20)
    a, b = fleet.servers
    through_b = ids[1::2]
    provider.words, provider.chunk_seconds = 60, 0.2
    killed_at: list[datetime] = []

    async def scenario() -> list[Followed]:
        followers = [
            asyncio.create_task(follow(fleet, (a, b)[n % 2], session, c, prompt(c), limit=90))
            for n, c in enumerate(ids)
        ]
        await provider.until_streaming(ids)
        await asyncio.sleep(1)
        killed_at.append(datetime.now(UTC))
        await asyncio.to_thread(fleet.stop, b, signal.SIGKILL)
        return list(await asyncio.gather(*followers))

    followed = asyncio.run(scenario())

    runs = site.sql(f"select conversation_id, status, resumes from chat_run where {where(ids)}")
    assert sorted(str(status) for _, status, _ in runs) == ["completed"] * len(ids)
    resumes = {int(str(c)): int(str(n)) for c, _, n in runs}
    assert {c: resumes[c] for c in ids} == {c: int(c in through_b) for c in ids}
    assert_whole_replies(site, provider, ids)
    assert_each_tool_call_executed_once(site, ids)
    assert_clients_saw_the_end(followed, provider, fleet, session)
    requests = provider.requests()
    for c in ids:  # B's replies that were streaming, asked again as they were
        tool_round, *replies = requests[c]
        assert tool_round[-1]["role"] == "user"
        assert replies == [replies[0]] * (2 if c in through_b else 1)

    leases = lease_rows(site, ids)
    claimed_after = []
    for c in ids:
        held = leases[c]
        outcomes = [outcome for _, outcome, _, _ in held]
        if c in through_b:
            assert outcomes == ["expired", "finished"]
            assert held[1][0].split(":")[1] == str(a.pid)
            claimed_after.append((held[1][2] - killed_at[0]).total_seconds())
        else:
            assert outcomes == ["finished"]
    # The lease (10 s) and a sweep (2 s) bound it; on one host a dead pid is seen at once.
    assert max(claimed_after) < 20
    assert a.errors() == []
    print(
        f"\nkill -9: {len(through_b)} runs resumed on the other process "
        f"{min(claimed_after):.1f}-{max(claimed_after):.1f} s after the kill, all completed; "
        f"provider requests +{sum(len(requests[c]) for c in ids) - TURNS * len(ids)} "
        f"for {len(through_b)} interrupted turns"
    )


_HELD_BY_A_DEAD_HOST = """
import json
from datetime import timedelta
from django.db import transaction
from django.utils import timezone
from chat import agent, transcripts
from chat.models import Conversation, Run, RunLease, ToolCall
made = []
for conversation in Conversation.objects.filter(pk__in={ids!r}).select_related("owner"):
    with transaction.atomic():
        now = timezone.now()
        run = Run.objects.create(
            conversation=conversation, created_by=conversation.owner, worker={worker!r},
            heartbeat_at=now, lease_expires_at=now + timedelta(seconds=60), steps=1,
            model="fake-model", parameters=conversation.agent_parameters().to_json(),
        )
        RunLease.objects.create(run=run, worker={worker!r}, acquired_at=now)
        ticket = json.dumps({{"ticket": f"c{{conversation.pk}}"}})
        booking = agent.ToolCall(id="call_book", name="book_slot", arguments=ticket)
        user = agent.ChatMessage(role="user", content=f"[c{{conversation.pk}}] Book a slot.")
        asking = agent.ChatMessage(role="assistant", tool_calls=(booking,))
        _, message = transcripts.append_messages(conversation, [user, asking], run=run)
        ToolCall.objects.create(
            run=run, message=message, call_id=booking.id, name=booking.name,
            arguments=booking.arguments,
        )
    made.append(run.pk)
print(json.dumps(made))
"""

_CLAIM_AT = """
import json, sys, time
from datetime import datetime
import django
django.setup()
from chat.models import Run
from chat.runs import leases
from chat.runs.tasks import WORKER_ID
seen, at = json.loads(sys.argv[1]), float(sys.argv[2])
rows = [Run(pk=pk, worker=worker, lease_expires_at=datetime.fromisoformat(lease))
        for pk, worker, lease in seen]
Run.objects.exists()  # connected before the race
time.sleep(max(0.0, at - time.time()))
print(json.dumps({"worker": WORKER_ID, "won": [row.pk for row in rows if leases.claim(row)]}))
"""
"""Claims the runs as a sweeper would, given the worker and lease it read of each."""


def test_of_processes_racing_to_claim_a_run_exactly_one_wins_and_one_resumes_it(
    site: Site, provider: Provider, fleet: Fleet
) -> None:
    """Eight runs left by a process on another host, mid-round (a write not started). Four
    processes, having read the same row, claim every one of them at the same instant (one
    atomic update on PostgreSQL): one wins each. The winners exit without resuming; the two
    daphne processes, both sweeping, then claim them again: one resumes each, and the write
    executes once."""
    _, ids = conversations(site, provider, "linus", 8)
    provider.words, provider.chunk_seconds = 10, 0.05
    script = _HELD_BY_A_DEAD_HOST.format(ids=ids, worker="elsewhere:4242:gone")
    runs = json.loads(site.manage("shell", stdin=script).strip().splitlines()[-1])
    seen = [
        [pk, worker, lease.isoformat()]
        for pk, worker, lease in site.sql(
            f"select id, worker, lease_expires_at from chat_run where {where(ids)} order by id"
        )
        if isinstance(lease, datetime)
    ]
    assert [pk for pk, _, _ in seen] == sorted(runs)
    at = time.time() + 6  # every claimer has started by then (one that has not loses)
    results: list[dict[str, Any]] = []

    def claimer() -> None:
        output = site.run("-c", _CLAIM_AT, json.dumps(seen), str(at))
        results.append(json.loads(output.strip().splitlines()[-1]))

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(results) == 4
    winners = Counter(pk for result in results for pk in result["won"])
    assert winners == dict.fromkeys(runs, 1)

    deadline = time.monotonic() + 40
    mine = where(ids)
    while site.sql(f"select count(*) from chat_run where {mine} and status = 'in_progress'") != [
        (0,)
    ]:
        assert time.monotonic() < deadline, "the runs were not resumed"
        time.sleep(0.2)

    statuses = site.sql(f"select status, resumes from chat_run where {mine}")
    assert statuses == [("completed", 2)] * len(ids)
    daphne = {str(server.pid) for server in fleet.servers}
    claimers = {result["worker"] for result in results}
    for held in lease_rows(site, ids).values():
        workers = [worker for worker, _, _, _ in held]
        assert [outcome for _, outcome, _, _ in held] == ["expired", "expired", "finished"]
        assert workers[0] == "elsewhere:4242:gone" and workers[1] in claimers
        assert workers[2].split(":")[1] in daphne
    requests = provider.requests()
    assert {c: len(requests[c]) for c in ids} == dict.fromkeys(ids, 1)  # the reply, once
    counted = executions(site)
    assert {c: counted[("book_slot", f"c{c}")] for c in ids} == dict.fromkeys(ids, 1)
    replies = site.sql(
        f"select conversation_id, content from chat_message where {mine} and role = 'assistant' "
        "and content != '' order by conversation_id"
    )
    assert replies == [(c, reply(c, provider.words)) for c in sorted(ids)]
