"""The rolling-restart scenario (`--scaleout`): runs streaming through two daphne processes while
each in turn is stopped with SIGTERM and started again on its port, as a deploy does.

Every run is a round of `get_current_time` calls, then a reply long enough to outlast the whole
deploy. A stopped process gives its runs AGENTLAB_SHUTDOWN_SECONDS (bench/site.py) to reach a
step boundary, then lets them go; the other process resumes them. The scenario counts the runs
completed, interrupted and resumed, the provider requests beyond one per model turn and how long
a run let go waited for another process, and checks every reply token by token.
`chat.testing.rolling` drives the deploy and the clients (they reconnect to the other process,
as the page does); tests/scaleout/test_rolling_restart.py asserts the same on the fake provider.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

import httpx

from bench.provider import ReplySpec
from bench.report import fmt, table, target_line
from bench.stats import check_tokens, summary, total_checks
from chat.testing.processes import DaphneServer
from chat.testing.rolling import Fleet, Followed, follow
from chat.testing.site import Site

RUNS_PER_PROCESS = 20
QUICK_RUNS_PER_PROCESS = 5
TOKENS = 300
PACE_MS = 40.0
"""12 s a reply: longer than a deploy of two processes (each stops in ~2-4 s, starts in ~3-5)."""
TOOL_ROUNDS = 1
GRACE_SECONDS = 4
"""AGENTLAB_SHUTDOWN_SECONDS of the bench's site: shorter than a reply, so that a stopped process
lets its runs go mid-reply (the hardest case) and exits before it is killed (10 s)."""
LIMIT_SECONDS = 180.0


def runs_needed(*, scaleout: bool, quick: bool) -> int:
    if not scaleout:
        return 0
    return 2 * (QUICK_RUNS_PER_PROCESS if quick else RUNS_PER_PROCESS)


def _where(conversations: Sequence[int]) -> str:
    return f"conversation_id in ({', '.join(map(str, conversations))})"


async def _records(provider_url: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=provider_url, timeout=30) as client:
        return list((await client.get("/stats")).json())


async def _until_streaming(provider_url: str, tags: set[str], wait: float = 60) -> bool:
    """Until every run's reply is streaming (its tool round done); False if some never did."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        records = await _records(provider_url)
        streaming = {r["tag"] for r in records if r["kind"] == "text" and r["first_token_at"]}
        if tags <= streaming:
            return True
        await asyncio.sleep(0.2)
    return False


def measure(
    site: Site,
    servers: list[DaphneServer],
    provider_url: str,
    session: str,
    conversations: list[int],
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Start a run in every conversation (alternating processes), roll the processes while the
    replies stream, wait for every run to end; the scenario's figures."""
    specs = [
        ReplySpec(tag=uuid.uuid4().hex[:10], tokens=TOKENS, pace_ms=PACE_MS, tools=TOOL_ROUNDS)
        for _ in conversations
    ]
    fleet = Fleet(servers)
    log(
        f"rolling restart: {len(specs)} runs ({TOOL_ROUNDS} tool round, {TOKENS} tokens at "
        f"{PACE_MS:g} ms/token) while each of {len(servers)} processes is stopped (SIGTERM) and "
        "started again"
    )

    async def drive() -> tuple[list[Followed], list[Any], bool, float]:
        started = time.monotonic()
        followers = [
            asyncio.create_task(
                follow(fleet, server, session, c, spec.prompt(), limit=LIMIT_SECONDS)
            )
            for server, c, spec in zip(itertools.cycle(servers), conversations, specs)
        ]
        streaming = await _until_streaming(provider_url, {spec.tag for spec in specs})
        await asyncio.sleep(1)
        restarts = await asyncio.to_thread(fleet.roll)
        followed = list(await asyncio.gather(*followers))
        return followed, restarts, streaming, time.monotonic() - started

    followed, restarts, streaming, took = asyncio.run(drive())
    records = asyncio.run(_records(provider_url))
    httpx.post(f"{provider_url}/reset", timeout=30)
    return _figures(site, conversations, specs, followed, restarts, records) | {
        "streaming_when_stopped": streaming,
        "wall_ms": took * 1000,
    }


def _figures(
    site: Site,
    conversations: list[int],
    specs: list[ReplySpec],
    followed: list[Followed],
    restarts: list[Any],
    records: list[dict[str, Any]],
) -> dict[str, Any]:
    where = _where(conversations)
    runs = site.sql(f"select status, resumes from chat_run where {where}")
    statuses = Counter(str(status) for status, _ in runs)
    resumes = [int(str(n)) for _, n in runs]
    ((not_repeated,),) = site.sql(
        "select count(*) from chat_toolcall join chat_run on chat_run.id = run_id "
        f"where {where} and failure = 'interrupted'"
    )
    replies = site.sql(
        f"select content from chat_message where {where} and role = 'assistant' "
        "and content != '' and version_id is null"
    )
    tokens = total_checks(check_tokens(str(content), TOKENS) for (content,) in replies)
    tokens["missing"] = len(conversations) - len(replies)
    ((expired,),) = site.sql(
        "select count(*) from chat_runlease join chat_run on chat_run.id = run_id "
        f"where {where} and outcome = 'expired'"
    )
    tags = {spec.tag for spec in specs}
    requests = sum(1 for record in records if record["tag"] in tags)
    turns = len(specs) * (TOOL_ROUNDS + 1)
    return {
        "runs": len(conversations),
        "processes": len(restarts),
        "tokens": TOKENS,
        "pace_ms": PACE_MS,
        "tool_rounds": TOOL_ROUNDS,
        "grace_s": GRACE_SECONDS,
        "completed": statuses["completed"],
        "interrupted": statuses["interrupted"],
        "failed": statuses["failed"] + statuses["cancelled"],
        "unfinished": statuses["in_progress"] + sum(1 for seen in followed if not seen.done),
        "resumed": sum(1 for n in resumes if n),
        "resumptions": sum(resumes),
        "calls_not_repeated": int(str(not_repeated)),
        "leases_expired": int(str(expired)),
        "provider_requests": requests,
        "turns": turns,
        "extra_requests": requests - turns,
        "handover_ms": summary(_handovers(site, where)),
        "client_sockets": summary(float(seen.sockets) for seen in followed),
        "replies": tokens,
        "restarts": [asdict(restart) for restart in restarts],
    }


def _handovers(site: Site, where: str) -> list[float]:
    """Milliseconds from a process letting a run go to another claiming it."""
    rows = site.sql(
        "select run_id, acquired_at, ended_at from chat_runlease join chat_run on chat_run.id = "
        f"run_id where {where} order by run_id, acquired_at, chat_runlease.id"
    )
    gaps = []
    for _, held in itertools.groupby(rows, key=lambda row: row[0]):
        for (_, _, ended), (_, acquired, _) in itertools.pairwise(held):
            if isinstance(ended, datetime) and isinstance(acquired, datetime):
                gaps.append((acquired - ended).total_seconds() * 1000)
    return gaps


def restart_targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """A deploy interrupts nothing: every run completes with its whole reply, and a resumption
    asks the provider again for the one turn that was streaming, no more."""
    scenario = report.get("rolling_restart")
    reason = "a --scaleout run" if scenario is None else None
    lost = None
    extra = None
    if scenario is not None:
        replies = scenario["replies"]
        lost = replies["lost"] + replies["duplicated"] + replies["reordered"] + replies["garbled"]
        lost += replies["missing"] * scenario["tokens"]
        if scenario["resumptions"]:
            extra = scenario["extra_requests"] / scenario["resumptions"]
    bad = None if scenario is None else scenario["interrupted"] + scenario["failed"]
    expired = None if scenario is None else float(scenario["leases_expired"])
    return [
        target_line("rolling restart: runs interrupted or failed", "0", bad, 0, "runs", reason),
        target_line(
            "rolling restart: runs not completed",
            "0",
            None if scenario is None else scenario["runs"] - scenario["completed"],
            0,
            "runs",
            reason,
        ),
        target_line(
            "rolling restart: lost + duplicated + reordered tokens in the replies",
            "0",
            None if lost is None else float(lost),
            0,
            "tokens",
            reason,
        ),
        target_line(
            "rolling restart: leases left to expire (a stopped process let every run go)",
            "0",
            expired,
            0,
            "leases",
            reason,
        ),
        target_line(
            "rolling restart: provider requests beyond one per turn, per resumption",
            "<= 1",
            extra,
            1,
            "requests",
            reason or "no run was resumed",
        ),
    ]


def restart_section(report: dict[str, Any]) -> list[str]:
    """The scenario's table, after the browser's."""
    scenario = report.get("rolling_restart")
    if not scenario:
        return []
    handover = scenario["handover_ms"]
    row = [
        str(scenario["runs"]),
        str(scenario["completed"]),
        str(scenario["interrupted"]),
        str(scenario["failed"]),
        str(scenario["unfinished"]),
        f"{scenario['resumed']} ({scenario['resumptions']})",
        str(scenario["calls_not_repeated"]),
        str(scenario["leases_expired"]),
        f"{scenario['provider_requests']} ({scenario['turns']})",
        f"+{scenario['extra_requests']}",
        f"{fmt(handover['p50'])} / {fmt(handover['max'])}",
        fmt(scenario["client_sockets"]["max"], 0),
    ]
    restarts = "; ".join(
        f":{r['port']} stopped in {r['stop_seconds']:.1f} s, served again {r['start_seconds']:.1f}"
        " s later"
        for r in scenario["restarts"]
    )
    return [
        "",
        f"Rolling restart: each of {scenario['processes']} processes stopped (SIGTERM, "
        f"{scenario['grace_s']} s grace) and started again while {scenario['runs']} runs stream "
        f"({scenario['tool_rounds']} tool round, {scenario['tokens']} tokens at "
        f"{scenario['pace_ms']:g} ms/token); took {scenario['wall_ms'] / 1000:.1f} s",
        table(
            [
                "runs",
                "completed",
                "interrupted",
                "failed",
                "unfinished",
                "resumed (resumptions)",
                "calls not repeated",
                "leases expired",
                "provider requests (turns)",
                "extra",
                "handover ms p50 / max",
                "sockets per client max",
            ],
            [row],
        ),
        f"Restarts: {restarts}"
        + ("" if scenario["streaming_when_stopped"] else " (some replies had not started yet)"),
    ]
