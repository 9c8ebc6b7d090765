"""The benchmark, phase by phase: set up, measure, compare with targets, report.

Phases: database writes per run (in a process of its own), then for every concurrency level a
direct round and a relayed round (interleaved when a level takes several rounds), then the
coalescing scenarios (frames against reply length and pace), then the browser. Every figure is
kept in milliseconds in the JSON; the table shows p50/p99.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench import browser as browser_probe
from bench.direct import DirectReply, direct_round
from bench.profile import Profiler
from bench.provider import ProviderProcess, ReplySpec
from bench.site import ROOT, Daphne, Site, scaleout_site, sqlite_site
from bench.stats import check_tokens, percentile, summary, total_checks
from bench.wsdriver import RelayedReply, Target, relayed_round

STUTTER_MS = 100.0
"""A pause longer than this between two text updates of a streaming reply counts as stutter."""

Log = Callable[[str], None]


@dataclass
class Options:
    levels: list[int] = field(default_factory=lambda: [1, 10, 50, 200])
    tokens: int = 500
    pace_ms: float = 0.0
    tool_rounds: int = 0
    browser: bool = True
    scaleout: bool = False
    quick: bool = False
    profile: Path | None = None
    command: str = ""

    @property
    def samples(self) -> int:
        """Replies wanted per level: a level smaller than this runs several rounds."""
        return 3 if self.quick else 30

    @property
    def scenario_samples(self) -> int:
        return 1 if self.quick else 3

    @property
    def browser_samples(self) -> int:
        return 2 if self.quick else 5

    def coalescing(self) -> list[tuple[int, float]]:
        """(tokens, pace_ms) pairs: three lengths at full speed, then a paced reply."""
        paced = (max(20, self.tokens // 10), 20.0) if self.quick else (200, 20.0)
        return [
            (max(10, self.tokens // 5), 0.0),
            (self.tokens, 0.0),
            (self.tokens * 4, 0.0),
            paced,
        ]

    def browser_scenarios(self) -> list[browser_probe.Scenario]:
        samples = self.browser_samples
        paced = max(20, self.tokens // 10) if self.quick else 200
        return [
            browser_probe.Scenario(self.tokens, 0.0, samples, self.tool_rounds),
            browser_probe.Scenario(paced, 20.0, samples, self.tool_rounds),
        ]


def ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


class Bench:
    """One benchmark run: holds the provider, the site, the servers and the conversations."""

    def __init__(self, options: Options, log: Log) -> None:
        self.options = options
        self.log = log
        self.flush_interval = _flush_interval()
        self.provider: ProviderProcess
        self.site: Site
        self.servers: list[Daphne] = []
        self.session = ""
        self.conversations: Iterator[int] = iter(())
        self.all_relayed: list[RelayedReply] = []

    def spec(self, tokens: int | None = None, pace_ms: float | None = None) -> ReplySpec:
        return ReplySpec(
            tag=uuid.uuid4().hex[:10],
            tokens=self.options.tokens if tokens is None else tokens,
            pace_ms=self.options.pace_ms if pace_ms is None else pace_ms,
            tools=self.options.tool_rounds,
        )

    def conversations_needed(self) -> int:
        options = self.options
        levels = sum(level * max(1, math.ceil(options.samples / level)) for level in options.levels)
        scenarios = len(options.coalescing()) * options.scenario_samples
        browser = sum(s.samples for s in options.browser_scenarios()) + 1 if options.browser else 0
        return 2 + levels + scenarios + browser

    def targets(self, count: int) -> list[Target]:
        """Conversations for a round; scaled out, each is watched on one process and sent to
        through the other."""
        chosen = []
        for index in range(count):
            watch = self.servers[index % len(self.servers)]
            send = self.servers[(index + 1) % len(self.servers)]
            chosen.append(Target(next(self.conversations), watch.url, send.url))
        return chosen

    def provider_records(self) -> dict[str, dict[str, Any]]:
        """The provider's text-round timings by tag, then forget them."""
        with httpx.Client(base_url=self.provider.url, timeout=30) as client:
            records = client.get("/stats").json()
            client.post("/reset")
        return {record["tag"]: record for record in records if record["kind"] == "text"}

    def relayed(self, specs: list[ReplySpec]) -> tuple[list[RelayedReply], float]:
        longest = max(spec.tokens * spec.pace_ms for spec in specs) / 1000
        timeout = 60 + 2 * longest + 0.2 * len(specs)
        replies = asyncio.run(
            relayed_round(self.targets(len(specs)), self.session, specs, limit=timeout)
        )
        self.all_relayed += replies
        return replies, _wall(replies)

    def direct(self, specs: list[ReplySpec]) -> tuple[list[DirectReply], float]:
        replies = asyncio.run(direct_round("127.0.0.1", self.provider.port, specs))
        ends = [reply.completed for reply in replies if reply.completed is not None]
        return replies, (max(ends) - min(reply.started for reply in replies)) if ends else 0.0

    def frame_bound(self, reply: RelayedReply) -> int:
        """Most text frames coalescing allows for a reply that streamed for this long."""
        return math.ceil(reply.streaming_span / self.flush_interval) + 2

    def profilers(self, name: str) -> list[Profiler]:
        """py-spy on every daphne for the next relayed round, when --profile is on."""
        if self.options.profile is None:
            return []
        profilers = []
        for number, server in enumerate(self.servers):
            path = self.options.profile / f"{name}-daphne{number}-{time.monotonic_ns()}.txt"
            profilers.append(Profiler(server.pid, path).start())
        time.sleep(0.5)  # py-spy attaches
        return profilers

    def violations(self, replies: Sequence[RelayedReply]) -> list[dict[str, Any]]:
        """A few replies that streamed in more text frames than coalescing allows."""
        return [
            {
                "text_frames": reply.text_frames,
                "bound": self.frame_bound(reply),
                "streaming_ms": ms(reply.streaming_span),
                "gaps_ms": [round(ms(gap) or 0.0, 2) for gap in reply.gaps],
            }
            for reply in replies
            if reply.text_frames > self.frame_bound(reply)
        ][:3]

    # Phases

    def db_writes(self) -> dict[str, Any]:
        lengths = "100,1000,10000"
        self.log(f"database writes per run: replies of {lengths} tokens")
        output = self.site.run(
            "-m", "bench.dbwrites",
            "--base-url", self.provider.base_url,
            "--lengths", lengths,
            "--tool-rounds", str(self.options.tool_rounds),
        )  # fmt: skip
        return dict(json.loads(output.strip().splitlines()[-1]))

    def warm_up(self) -> None:
        self.log("warm-up")
        for _ in range(2):
            self.direct([self.spec()])
            self.relayed([self.spec()])
        self.provider_records()

    def level(self, level: int) -> dict[str, Any]:
        rounds = max(1, math.ceil(self.options.samples / level))
        self.log(f"concurrency {level}: {rounds} round(s) of direct + relayed")
        for server in self.servers:
            server.reset_peak()
        direct: list[DirectReply] = []
        relayed: list[RelayedReply] = []
        direct_wall = relayed_wall = 0.0
        latency_first: list[float] = []
        latency_last: list[float] = []
        profiles: list[dict[str, Any]] = []
        for _ in range(rounds):
            replies, wall = self.direct([self.spec() for _ in range(level)])
            direct += replies
            direct_wall += wall
            time.sleep(0.1)
            profilers = self.profilers(f"c{level}")
            round_replies, wall = self.relayed([self.spec() for _ in range(level)])
            profiles += [profiler.stop() for profiler in profilers]
            relayed += round_replies
            relayed_wall += wall
            records = self.provider_records()
            for reply in round_replies:
                record = records.get(reply.tag)
                if record is None:
                    continue
                if reply.first_token is not None and record["first_token_at"] is not None:
                    latency_first.append(reply.first_token - record["first_token_at"])
                if reply.completed is not None and record["last_token_at"] is not None:
                    latency_last.append(reply.completed - record["last_token_at"])
            time.sleep(0.1)
        memory = {server.url: server.memory() for server in self.servers}
        tokens = self.options.tokens
        direct_ttft = summary(ms(reply.ttft) for reply in direct)
        direct_total = summary(ms(reply.total) for reply in direct)
        relayed_ttft = summary(ms(reply.ttft) for reply in relayed)
        relayed_total = summary(ms(reply.total) for reply in relayed)
        finished = [reply for reply in relayed if reply.completed is not None]
        return {
            "level": level,
            "rounds": rounds,
            "samples": len(relayed),
            "direct": {
                "ttft_ms": direct_ttft,
                "total_ms": direct_total,
                "tokens_per_s": len(direct) * tokens / direct_wall if direct_wall else None,
                "replies_per_s": len(direct) / direct_wall if direct_wall else None,
                "errors": sorted({reply.error for reply in direct if reply.error}),
                "tokens": total_checks(check_tokens(reply.text, tokens) for reply in direct),
            },
            "relayed": {
                "ttft_ms": relayed_ttft,
                "total_ms": relayed_total,
                "frames": summary(reply.frames for reply in finished),
                "text_frames": summary(reply.text_frames for reply in finished),
                "bytes": summary(reply.bytes for reply in finished),
                "tokens_per_s": len(relayed) * tokens / relayed_wall if relayed_wall else None,
                "replies_per_s": len(relayed) / relayed_wall if relayed_wall else None,
                "unfinished": len(relayed) - len(finished),
                "notices": sorted({notice for reply in relayed for notice in reply.notices}),
                "tokens": total_checks(check_tokens(reply.text, tokens) for reply in relayed),
                "final_text": total_checks(
                    check_tokens(reply.final_text, tokens) for reply in relayed
                ),
                "frame_bound_violations": sum(
                    1 for reply in finished if reply.text_frames > self.frame_bound(reply)
                ),
                "frame_bound_examples": self.violations(finished),
            },
            "overhead_ms": {
                metric: {
                    q: _difference(relayed_figure[q], direct_figure[q]) for q in ("p50", "p99")
                }
                for metric, relayed_figure, direct_figure in (
                    ("ttft", relayed_ttft, direct_ttft),
                    ("total", relayed_total, direct_total),
                )
            },
            "ratio": {
                metric: {q: _ratio(relayed_figure[q], direct_figure[q]) for q in ("p50", "p99")}
                for metric, relayed_figure, direct_figure in (
                    ("ttft", relayed_ttft, direct_ttft),
                    ("total", relayed_total, direct_total),
                )
            },
            "relay_latency_ms": {
                "first_token": summary(ms(value) for value in latency_first),
                "last_token": summary(ms(value) for value in latency_last),
            },
            "memory_kb": memory,
            "profiles": profiles,
        }

    def coalescing(self) -> list[dict[str, Any]]:
        results = []
        for tokens, pace_ms in self.options.coalescing():
            self.log(f"coalescing: {tokens} tokens at {pace_ms:g} ms/token, concurrency 1")
            direct: list[DirectReply] = []
            relayed: list[RelayedReply] = []
            for _ in range(self.options.scenario_samples):
                direct += self.direct([self.spec(tokens, pace_ms)])[0]
                relayed += self.relayed([self.spec(tokens, pace_ms)])[0]
            self.provider_records()
            gaps = [ms(gap) or 0.0 for reply in relayed for gap in reply.gaps]
            direct_gaps = [ms(gap) or 0.0 for reply in direct for gap in reply.gaps]
            results.append(
                {
                    "tokens": tokens,
                    "pace_ms": pace_ms,
                    "samples": len(relayed),
                    "frames": summary(reply.frames for reply in relayed),
                    "text_frames": summary(reply.text_frames for reply in relayed),
                    "bytes": summary(reply.bytes for reply in relayed),
                    "streaming_ms": summary(ms(reply.streaming_span) for reply in relayed),
                    "frame_bound": [self.frame_bound(reply) for reply in relayed],
                    "frame_bound_violations": sum(
                        1 for reply in relayed if reply.text_frames > self.frame_bound(reply)
                    ),
                    "frame_bound_examples": self.violations(relayed),
                    "gap_ms": {
                        "p50": percentile(gaps, 50),
                        "p95": percentile(gaps, 95),
                        "max": max(gaps, default=None),
                    },
                    "direct_gap_ms": {
                        "p50": percentile(direct_gaps, 50),
                        "max": max(direct_gaps, default=None),
                    },
                    "ttft_ms": summary(ms(reply.ttft) for reply in relayed),
                    "total_ms": summary(ms(reply.total) for reply in relayed),
                    "direct_total_ms": summary(ms(reply.total) for reply in direct),
                    "tokens_check": total_checks(
                        check_tokens(reply.text, tokens) for reply in relayed
                    ),
                }
            )
        return results

    def browser(self) -> list[dict[str, Any]]:
        scenarios = self.options.browser_scenarios()
        count = sum(scenario.samples for scenario in scenarios) + 1
        conversations = [next(self.conversations) for _ in range(count)]
        raw = browser_probe.probe(
            server_url=self.servers[0].url,
            session=self.session,
            conversations=conversations,
            scenarios=scenarios,
            provider_host="127.0.0.1",
            provider_port=self.provider.port,
            log=self.log,
        )
        self.provider_records()
        results = []
        for item in raw:
            scenario, direct, screen = item["scenario"], item["direct"], item["screen"]
            good = [sample for sample in screen if not sample.error]
            direct_ttft = summary(ms(reply.ttft) for reply in direct)
            direct_total = summary(ms(reply.total) for reply in direct)
            first = summary(sample.first for sample in good)
            done = summary(sample.done for sample in good)
            gaps = [gap for sample in good for gap in sample.gaps]
            results.append(
                {
                    "tokens": scenario.tokens,
                    "pace_ms": scenario.pace_ms,
                    "samples": len(screen),
                    "direct_ms": {"ttft": direct_ttft, "total": direct_total},
                    "screen_ms": {
                        "first": first,
                        "first_painted": summary(sample.first_frame for sample in good),
                        "done": done,
                        "done_painted": summary(sample.done_frame for sample in good),
                        "sent": summary(sample.sent for sample in good),
                        "first_arrival": summary(sample.first_arrival for sample in good),
                        "first_handled": summary(sample.first_handled for sample in good),
                    },
                    "overhead_ms": {
                        "first": _difference(first["p50"], direct_ttft["p50"]),
                        "done": _difference(done["p50"], direct_total["p50"]),
                        "first_max": _difference(first["max"], direct_ttft["p50"]),
                        "done_max": _difference(done["max"], direct_total["p50"]),
                    },
                    "updates": summary(sample.updates for sample in good),
                    "gap_ms": {
                        "p50": percentile(gaps, 50),
                        "p95": percentile(gaps, 95),
                        "max": max(gaps, default=None),
                    },
                    "tokens_failed": sum(1 for sample in good if not sample.tokens_ok),
                    "errors": [sample.error for sample in screen if sample.error],
                }
            )
        return results

    def execute(self) -> dict[str, Any]:
        options = self.options
        default = ReplySpec(
            tokens=options.tokens, pace_ms=options.pace_ms, tools=options.tool_rounds
        )
        results: dict[str, Any] = {}
        with ExitStack() as stack:
            self.provider = stack.enter_context(ProviderProcess(default=default))
            make_site = scaleout_site if options.scaleout else sqlite_site
            backend = "PostgreSQL + Redis" if options.scaleout else "SQLite"
            self.log(f"setting up the site: {backend}")
            self.site = stack.enter_context(make_site(self.provider.base_url))
            self.session, ids = self.site.make_conversations(self.conversations_needed())
            self.conversations = iter(ids)
            results["db_writes"] = self.db_writes()
            for _ in range(2 if options.scaleout else 1):
                self.servers.append(stack.enter_context(self.site.daphne()))
            self.warm_up()
            results["levels"] = [self.level(level) for level in options.levels]
            results["coalescing"] = self.coalescing()
            results["browser"] = self.browser() if options.browser else None
            results["daphne"] = [
                {
                    "url": server.url,
                    "pid": server.pid,
                    "errors": server.errors()[:20],
                    "log": _keep_log(server) if server.errors() else None,
                }
                for server in self.servers
            ]
            results["correctness"] = total_checks(
                check_tokens(reply.text, reply.tokens) for reply in self.all_relayed
            )
            results["correctness"]["unfinished"] = sum(
                1 for reply in self.all_relayed if reply.completed is None
            )
        return results


def _keep_log(server: Daphne) -> str:
    """Copy the log of a daphne that logged errors out of the temporary directory."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    target = ROOT / "var" / "bench" / f"{stamp}-daphne-{server.port}.log"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(server.log, target)
    return str(target)


def _wall(replies: Sequence[RelayedReply]) -> float:
    ends = [reply.completed for reply in replies if reply.completed is not None]
    return (max(ends) - min(reply.sent_at for reply in replies)) if ends else 0.0


def _flush_interval() -> float:
    try:
        from chat.fragments import FLUSH_INTERVAL
    except Exception:
        return 0.04
    return float(FLUSH_INTERVAL)


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        return ""


def run(options: Options, log: Log = print) -> dict[str, Any]:
    """Run the whole benchmark; returns the report (also written as JSON)."""
    started = time.monotonic()
    load_before = [round(value, 2) for value in os.getloadavg()]
    bench = Bench(options, log)
    results = bench.execute()
    report: dict[str, Any] = {
        "meta": {
            "command": options.command,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": _commit(),
            "mode": (
                "scaleout: 2 daphne, PostgreSQL, Redis" if options.scaleout else "1 daphne, SQLite"
            ),
            "python": sys.version.split()[0],
            "loadavg_before": None,
            "loadavg_after": [round(value, 2) for value in os.getloadavg()],
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
            "duration_s": None,
        },
        "config": {
            "levels": options.levels,
            "tokens": options.tokens,
            "pace_ms": options.pace_ms,
            "tool_rounds": options.tool_rounds,
            "quick": options.quick,
            "flush_interval_ms": bench.flush_interval * 1000,
            "stutter_ms": STUTTER_MS,
        },
        **results,
    }
    report["meta"]["loadavg_before"] = load_before
    report["targets"] = evaluate(report)
    report["meta"]["duration_s"] = round(time.monotonic() - started, 1)
    return report


def _target(name: str, limit: str, value: float | None, bound: float, unit: str = "ms") -> dict:
    if value is None:
        return {"name": name, "target": limit, "value": None, "met": None, "status": "not measured"}
    met = value <= bound
    status = "met" if met else f"missed by {value - bound:.1f} {unit}".rstrip()
    return {"name": name, "target": limit, "value": value, "met": met, "status": status}


def evaluate(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target of the issue, met or missed by how much."""
    levels = {level["level"]: level for level in report.get("levels") or []}
    targets = []
    browser = report.get("browser") or []
    full_speed = next((s for s in browser if s["pace_ms"] == 0), None)
    paced_browser = next((s for s in browser if s["pace_ms"] > 0), None)
    targets.append(
        _target(
            "browser: full-speed reply complete on screen vs direct (p50)",
            "<= 150 ms",
            full_speed["overhead_ms"]["done"] if full_speed else None,
            150,
        )
    )
    targets.append(
        _target(
            "browser: first token on screen vs direct (p50)",
            "<= 30 ms",
            full_speed["overhead_ms"]["first"] if full_speed else None,
            30,
        )
    )
    one = levels.get(1)
    targets.append(
        _target(
            "websocket c=1: first-token overhead p50",
            "<= 10 ms",
            one["overhead_ms"]["ttft"]["p50"] if one else None,
            10,
        )
    )
    top = levels.get(200)
    if top:
        tokens = top["relayed"]["tokens"]
        lost = tokens["lost"] + tokens["duplicated"] + tokens["reordered"] + tokens["garbled"]
        lost += top["relayed"]["unfinished"] * report["config"]["tokens"]
    targets.append(
        _target(
            "websocket c=200: lost + duplicated + reordered tokens",
            "0",
            float(lost) if top else None,
            0,
            "tokens",
        )
    )
    targets.append(
        _target(
            "websocket c=200: first-token overhead p99",
            "< 250 ms",
            top["overhead_ms"]["ttft"]["p99"] if top else None,
            250,
        )
    )
    violations = sum(level["relayed"]["frame_bound_violations"] for level in levels.values())
    violations += sum(s["frame_bound_violations"] for s in report.get("coalescing") or [])
    targets.append(
        _target(
            "frames bounded by time: replies with more text frames than ceil(span/interval) + 2",
            "0",
            float(violations),
            0,
            "replies",
        )
    )
    paced = next((s for s in report.get("coalescing") or [] if s["pace_ms"] > 0), None)
    targets.append(
        _target(
            f"no stutter at {paced['pace_ms']:g} ms/token: longest pause between text frames"
            if paced
            else "no stutter: longest pause between text frames",
            f"<= {STUTTER_MS:g} ms",
            paced["gap_ms"]["max"] if paced else None,
            STUTTER_MS,
        )
    )
    targets.append(
        _target(
            "no stutter on screen: longest pause between text updates",
            f"<= {STUTTER_MS:g} ms",
            paced_browser["gap_ms"]["max"] if paced_browser else None,
            STUTTER_MS,
        )
    )
    db = report.get("db_writes") or {}
    counts = [run["writes"] for run in db.get("runs", [])]
    targets.append(
        _target(
            "database writes per run do not grow with reply length (max - min)",
            "0",
            float(max(counts) - min(counts)) if counts else None,
            0,
            "writes",
        )
    )
    correctness = report.get("correctness") or {}
    bad = sum(
        correctness.get(key, 0)
        for key in ("lost", "duplicated", "reordered", "garbled", "unfinished")
    )
    targets.append(
        _target(
            "every relayed reply equals the provider's text (all phases)",
            "0",
            float(bad) if correctness else None,
            0,
            "tokens",
        )
    )
    return targets


# Output


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def _pair(figure: dict[str, Any], digits: int = 1) -> str:
    return f"{_fmt(figure['p50'], digits)} / {_fmt(figure['p99'], digits)}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    columns = zip(headers, *rows, strict=False)
    widths = [max(len(str(cell)) for cell in column) for column in columns]
    line = "  ".join(header.ljust(width) for header, width in zip(headers, widths, strict=False))
    out = [line, "  ".join("-" * width for width in widths)]
    for row in rows:
        out.append("  ".join(str(c).rjust(w) for c, w in zip(row, widths, strict=False)))
    return "\n".join(out)


def render(report: dict[str, Any]) -> str:
    """The report as readable tables."""
    meta, config = report["meta"], report["config"]
    parts = [
        f"Agent Lab streaming benchmark — {meta['mode']}, {meta['machine']}, "
        f"Python {meta['python']}, commit {meta['commit'] or '?'}, {meta['date']}",
        f"reply {config['tokens']} tokens at {config['pace_ms']:g} ms/token, "
        f"{config['tool_rounds']} tool round(s); coalescing interval "
        f"{config['flush_interval_ms']:g} ms; run took {meta['duration_s']} s; load average "
        f"{meta['loadavg_before'][0]} before, {meta['loadavg_after'][0]} after",
        "",
        "Latency, ms, p50 / p99 (overhead = relayed - direct; ratio = relayed / direct)",
    ]
    rows = []
    for level in report["levels"]:
        direct, relayed = level["direct"], level["relayed"]
        rows.append(
            [
                str(level["level"]),
                str(level["samples"]),
                _pair(direct["ttft_ms"]),
                _pair(relayed["ttft_ms"]),
                _pair(level["overhead_ms"]["ttft"]),
                f"{_fmt(level['ratio']['ttft']['p50'])}x",
                _pair(direct["total_ms"]),
                _pair(relayed["total_ms"]),
                _pair(level["overhead_ms"]["total"]),
                f"{_fmt(level['ratio']['total']['p50'], 2)}x",
                _pair(level["relay_latency_ms"]["first_token"]),
            ]
        )
    parts.append(
        _table(
            [
                "conc",
                "n",
                "direct TTFT",
                "relayed TTFT",
                "TTFT overhead",
                "ratio",
                "direct complete",
                "relayed complete",
                "complete overhead",
                "ratio",
                "hop 1st token",
            ],
            rows,
        )
    )
    parts += ["", "Volume, throughput, memory, correctness"]
    rows = []
    for level in report["levels"]:
        direct, relayed = level["direct"], level["relayed"]
        peak = [m["VmHWM"] for m in level["memory_kb"].values() if m["VmHWM"]]
        tokens = relayed["tokens"]
        rows.append(
            [
                str(level["level"]),
                _pair(relayed["frames"], 0),
                _pair(relayed["text_frames"], 0),
                _pair(relayed["bytes"], 0),
                _fmt(relayed["tokens_per_s"], 0),
                _fmt(direct["tokens_per_s"], 0),
                _fmt(relayed["replies_per_s"]),
                " + ".join(f"{value / 1024:.0f}" for value in peak),
                f"{tokens['lost']}/{tokens['duplicated']}/{tokens['reordered']}",
                str(relayed["unfinished"]),
            ]
        )
    parts.append(
        _table(
            [
                "conc",
                "frames/reply",
                "text frames",
                "bytes/reply",
                "tok/s relayed",
                "tok/s direct",
                "replies/s",
                "daphne peak MB",
                "lost/dup/reord",
                "unfinished",
            ],
            rows,
        )
    )
    parts += ["", "Coalescing at concurrency 1 (frames per reply against length and pace)"]
    rows = [
        [
            str(s["tokens"]),
            f"{s['pace_ms']:g}",
            _fmt(s["streaming_ms"]["p50"]),
            _fmt(s["frames"]["p50"], 0),
            _fmt(s["text_frames"]["p50"], 0),
            str(max(s["frame_bound"], default=0)),
            _fmt(s["bytes"]["p50"], 0),
            f"{_fmt(s['gap_ms']['p50'])} / {_fmt(s['gap_ms']['max'])}",
            _fmt(s["ttft_ms"]["p50"]),
            f"{_fmt(s['total_ms']['p50'])} vs {_fmt(s['direct_total_ms']['p50'])}",
        ]
        for s in report["coalescing"]
    ]
    parts.append(
        _table(
            [
                "tokens",
                "ms/token",
                "streaming ms",
                "frames",
                "text frames",
                "bound",
                "bytes",
                "gap p50 / max",
                "TTFT",
                "complete vs direct",
            ],
            rows,
        )
    )
    if report.get("browser"):
        parts += ["", "Browser (chromium, ms from the Enter key; direct = client on the provider)"]
        rows = []
        for s in report["browser"]:
            screen, direct = s["screen_ms"], s["direct_ms"]
            rows.append(
                [
                    str(s["tokens"]),
                    f"{s['pace_ms']:g}",
                    str(s["samples"]),
                    f"{_fmt(direct['ttft']['p50'])}",
                    f"{_fmt(screen['first']['p50'])} (max {_fmt(screen['first']['max'])})",
                    _fmt(s["overhead_ms"]["first"]),
                    f"{_fmt(direct['total']['p50'])}",
                    f"{_fmt(screen['done']['p50'])} (max {_fmt(screen['done']['max'])})",
                    _fmt(s["overhead_ms"]["done"]),
                    f"{_fmt(s['gap_ms']['p95'])} / {_fmt(s['gap_ms']['max'])}",
                    str(s["tokens_failed"] + len(s["errors"])),
                ]
            )
        parts.append(
            _table(
                [
                    "tokens",
                    "ms/token",
                    "n",
                    "direct TTFT",
                    "first on screen",
                    "overhead",
                    "direct complete",
                    "complete on screen",
                    "overhead",
                    "gap p95 / max",
                    "bad",
                ],
                rows,
            )
        )
        parts.append(
            "First token's way, p50 ms from the Enter key: "
            + "; ".join(
                f"{s['tokens']} tokens at {s['pace_ms']:g} ms/token: frame sent "
                f"{_fmt(s['screen_ms']['sent']['p50'])}, first text frame arrives "
                f"{_fmt(s['screen_ms']['first_arrival']['p50'])}, htmx done "
                f"{_fmt(s['screen_ms']['first_handled']['p50'])}"
                for s in report["browser"]
                if "sent" in s["screen_ms"]
            )
        )
    db = report["db_writes"]
    parts += [
        "",
        "Database writes per run (INSERT/UPDATE/DELETE, counted in the run's process): "
        + ", ".join(f"{run['tokens']:,} tokens: {run['writes']}" for run in db["runs"])
        + (" — equal" if db["equal"] else " — NOT equal"),
        "  " + ", ".join(f"{k}: {v}" for k, v in db["runs"][0]["by_statement"].items()),
    ]
    errors = [line for server in report["daphne"] for line in server["errors"]]
    if errors:
        logs = ", ".join(server["log"] for server in report["daphne"] if server.get("log"))
        parts.append(f"daphne logged {len(errors)} error line(s): {errors[0][:200]} (logs: {logs})")
    parts += ["", "Targets"]
    width = max(len(target["name"]) for target in report["targets"])
    for target in report["targets"]:
        value = "-" if target["value"] is None else _fmt(target["value"])
        parts.append(
            f"  {target['name'].ljust(width)}  {target['target']:>9}  {value:>9}  "
            f"{target['status']}"
        )
    return "\n".join(parts)


def default_json_path() -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return ROOT / "var" / "bench" / f"{stamp}.json"


def write_json(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
