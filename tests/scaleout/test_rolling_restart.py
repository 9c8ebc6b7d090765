"""A deploy or a crash interrupts nothing, on two daphne processes sharing PostgreSQL and Redis.

A rolling deploy (SIGTERM each process in turn, start it again) and a kill -9 in the middle of
dozens of runs: every run completes, no tool call executes twice (the tools write each execution
down, tests/scaleout/rolling_tools.py), only the turn that was streaming is asked of the provider
again, and the clients, reconnecting to the other process, see every run end with its whole
reply. Real processes and signals, the strict fake provider over HTTP, real WebSockets.
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import re
import signal
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from chat.testing.openai_script import MODEL, ScriptedResponse, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.testing.rolling import Fleet, Followed, follow
from chat.testing.site import Site, postgres_site
from tests.scaleout.conftest import POSTGRES, REDIS

pytestmark = [pytest.mark.scaleout, pytest.mark.slow]

SITE_ENV = {
    "AGENTLAB_TOOL_MODULES": "tests.scaleout.rolling_tools",
    # Shorter than a reply: a deploy lets the runs still streaming go mid-step, to resume.
    "AGENTLAB_SHUTDOWN_SECONDS": "4",
    "AGENTLAB_CHECKPOINT_SECONDS": "0.5",
    "AGENTLAB_TITLES": "off",  # a title would be one more request to the provider
}
LOGGED_TOOLS = ("read_ledger", "book_slot")
TAG = re.compile(r"\[c(\d+)\]")
MARKUP = re.compile(r"<[^>]+>")
TURNS = 2
"""Model turns of a run: the round of tool calls, then the reply."""

_ON_PROVIDER = """
from chat.models import Conversation, ProviderProfile
profile, _ = ProviderProfile.objects.update_or_create(
    name="fake",
    defaults={{"base_url": {url!r}, "model": {model!r}, "api_key_env": "",
               "available_to_everyone": True}},
)
Conversation.objects.filter(pk__in={ids!r}).update(profile=profile)
"""


def reply(conversation: int, words: int) -> str:
    return f"Done for c{conversation}: " + " ".join(f"w{n}" for n in range(words)) + " end."


class Provider:
    """The strict fake provider answering each run by its conversation's tag: a round of three
    calls (the built-in clock, a read, a write), then a reply streamed over some seconds."""

    def __init__(self, fake: FakeOpenAIServer) -> None:
        self.fake = fake
        self.words = 60
        self.chunk_seconds = 0.2
        """Between chunks of 6 characters: a reply of n words streams for about n / 7 s."""
        fake.responder = self.respond

    def respond(self, body: Any) -> ScriptedResponse:
        conversation = tag_of(body)
        if body["messages"][-1]["role"] == "user":
            ticket = json.dumps({"ticket": f"c{conversation}"})
            return tool_turn(
                [
                    ("call_time", "get_current_time", '{"timezone": "UTC"}'),
                    ("call_read", "read_ledger", ticket),
                    ("call_book", "book_slot", ticket),
                ]
            )
        text = reply(conversation, self.words)
        return text_turn(text, chunk_size=6).but(chunk_delay=self.chunk_seconds)

    def requests(self) -> dict[int, list[list[dict[str, Any]]]]:
        """The messages of every completion request, by conversation."""
        found: dict[int, list[list[dict[str, Any]]]] = defaultdict(list)
        for request in list(self.fake.requests):
            if request.method == "POST" and isinstance(request.body, dict):
                found[tag_of(request.body)].append(request.body["messages"])
        return found

    async def until_streaming(self, conversations: list[int]) -> None:
        """Until every conversation's reply is being asked for (its tool round is done)."""
        async with asyncio.timeout(60):
            # The requests are counted by the server's threads: nothing here to wait on.
            while not all(len(self.requests()[c]) >= TURNS for c in conversations):  # noqa: ASYNC110
                await asyncio.sleep(0.1)


def tag_of(body: dict[str, Any]) -> int:
    users = [m["content"] for m in body["messages"] if m["role"] == "user"]
    found = TAG.search(str(users[-1])) if users else None
    return int(found.group(1)) if found else 0


def prompt(conversation: int) -> str:
    return f"[c{conversation}] Check the time and the ledger, book a slot, then tell me."


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


def conversations(
    site: Site, provider: Provider, username: str, count: int
) -> tuple[str, list[int]]:
    """A user's session and `count` conversations on the fake provider's profile."""
    session, ids = site.make_conversations(count, username)
    script = _ON_PROVIDER.format(url=provider.fake.base_url, model=MODEL, ids=ids)
    site.manage("shell", stdin=script)
    return session, ids


def where(ids: list[int]) -> str:
    return f"conversation_id in ({', '.join(map(str, ids))})"


def executions(site: Site) -> Counter[tuple[str, str]]:
    """How many times each (tool, ticket) executed, in any process."""
    path = site.directory / "var" / "tool-executions.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter((row["tool"], row["ticket"]) for row in map(json.loads, lines))


def shown(frame: str) -> str:
    """A frame's text as the page shows it."""
    return " ".join(html.unescape(MARKUP.sub(" ", frame)).split())


def assert_whole_replies(site: Site, provider: Provider, ids: list[int]) -> None:
    """Each conversation: the user's message, the round of calls and their three results, and
    one reply, exactly the provider's (no draft left, nothing twice); every call completed."""
    rows = site.sql(
        f"select conversation_id, role, content from chat_message where {where(ids)} "
        "and version_id is null order by conversation_id, index"
    )
    by_conversation: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for conversation, role, content in rows:
        by_conversation[int(str(conversation))].append((str(role), str(content)))
    for conversation in ids:
        roles = [role for role, _ in by_conversation[conversation]]
        assert roles == ["user", "assistant", "tool", "tool", "tool", "assistant"], conversation
        assert by_conversation[conversation][-1][1] == reply(conversation, provider.words)
    calls = site.sql(
        "select chat_toolcall.status, count(*) from chat_toolcall join chat_run on chat_run.id = "
        f"run_id where {where(ids)} group by chat_toolcall.status"
    )
    assert calls == [("completed", 3 * len(ids))]


def assert_each_tool_call_executed_once(site: Site, ids: list[int]) -> None:
    wanted = {(tool, f"c{c}"): 1 for c in ids for tool in LOGGED_TOOLS}
    counted = executions(site)
    assert {key: counted[key] for key in wanted} == wanted


def assert_clients_saw_the_end(
    followed: list[Followed], provider: Provider, fleet: Fleet, session: str
) -> None:
    """Each client saw its run end with the whole reply, and the page shows it too."""
    for seen in followed:
        assert seen.done, f"conversation {seen.conversation}: no end in {len(seen.frames)} frames"
        whole = reply(seen.conversation, provider.words)
        assert whole in shown(seen.final), shown(seen.final)
        server = fleet.live()[seen.conversation % len(fleet.live())]
        page = httpx.get(f"{server.url}/c/{seen.conversation}/", cookies={"sessionid": session})
        assert whole in shown(page.text)


def lease_rows(site: Site, ids: list[int]) -> dict[int, list[tuple[str, str, datetime, Any]]]:
    """The leases of each conversation's run, in order: (worker, outcome, acquired, ended)."""
    rows = site.sql(
        "select conversation_id, chat_runlease.worker, outcome, acquired_at, ended_at "
        "from chat_runlease "
        f"join chat_run on chat_run.id = run_id where {where(ids)} "
        "order by conversation_id, acquired_at, chat_runlease.id"
    )
    found: dict[int, list[tuple[str, str, datetime, Any]]] = defaultdict(list)
    for conversation, worker, outcome, acquired, ended in rows:
        assert isinstance(acquired, datetime)
        found[int(str(conversation))].append((str(worker), str(outcome), acquired, ended))
    return found


def handovers(leases: dict[int, list[tuple[str, str, datetime, Any]]]) -> list[float]:
    """Seconds from a process letting a run go (or dying) to the next one claiming it."""
    gaps = []
    for held in leases.values():
        for (_, _, _, ended), (_, _, acquired, _) in itertools.pairwise(held):
            gaps.append((acquired - ended).total_seconds())
    return gaps


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
    for c in ids:  # each resume asks again for the reply that was streaming, nothing else
        tool_round, *replies = requests[c]
        assert tool_round[-1]["role"] == "user"
        assert replies == [replies[0]] * (1 + resumes[c])
    extra = sum(len(requests[c]) for c in ids) - TURNS * len(ids)
    leases = lease_rows(site, ids)
    outcomes = Counter(outcome for held in leases.values() for _, outcome, _, _ in held)
    assert outcomes["expired"] == 0  # a SIGTERM lets go of every run, none is left to expire
    assert outcomes["finished"] == len(ids)
    gaps = handovers(leases)
    assert max(gaps) < 10
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
