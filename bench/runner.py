"""The benchmark, phase by phase: set up, measure, compare with targets, report.

Phases: database writes per run (in a process of its own), a kept provider connection against
a new one over TLS, the start-up of commands that need no server, then for every concurrency
level a direct round and a relayed round (interleaved when a level takes several rounds), then
the coalescing scenarios (frames against reply length and pace), then the browser, then (scaled
out) a rolling restart of the processes under streaming runs (bench/restart.py). Every figure is
kept in milliseconds in the JSON; the table shows p50/p99. Every relayed round also reads the
daphne processes' CPU time (bench/cpu.py); right after concurrency 1 (or before the levels when
1 is not one of them), short replies at concurrency 1 give the fixed cost of a run's start and
finish by a linear fit.
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
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings

from bench import browser as browser_probe
from bench import restart, startup
from bench.cpu import CpuMeter, CpuTally, fit_figures, tally_figures, total, used
from bench.direct import DirectReply, direct_round
from bench.figures import LevelSamples, browser_figures, coalescing_figures, level_figures
from bench.profile import Profiler
from bench.provider import ProviderProcess, ReplySpec
from bench.report import STUTTER_MS, default_json_path, evaluate, render, write_json
from bench.site import open_site
from bench.stats import check_tokens, total_checks, wall
from bench.tls import measure as tls_measure
from bench.wsdriver import RelayedReply, Target, relayed_round
from chat.testing.processes import ROOT, DaphneServer
from chat.testing.site import Site

__all__ = ["Bench", "Options", "default_json_path", "evaluate", "render", "run", "write_json"]

Log = Callable[[str], None]

TOOL_SCENARIO = (100, 0.0)
"""The browser's tool scenario: one get_current_time round, then 100 tokens at full speed."""

REFERENCE_TOKENS = 500
"""The server CPU target is per reply of this many tokens."""


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
    def startup_samples(self) -> int:
        return 2 if self.quick else 5

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
        scenarios = [
            browser_probe.Scenario(self.tokens, 0.0, samples, self.tool_rounds),
            browser_probe.Scenario(paced, 20.0, samples, self.tool_rounds),
        ]
        tool = browser_probe.Scenario(*TOOL_SCENARIO, samples=samples, tools=1)
        if (self.tokens, self.tool_rounds) != (tool.tokens, tool.tools):
            scenarios.append(tool)
        return scenarios

    @property
    def cpu_short_tokens(self) -> int:
        """The short replies of the CPU fit: a tenth of the reply, at least one token."""
        return max(1, self.tokens // 10)


class Bench:
    """One benchmark run: holds the provider, the site, the servers and the conversations."""

    def __init__(self, options: Options, log: Log) -> None:
        self.options = options
        self.log = log
        self.flush_interval = _flush_interval()
        self.provider: ProviderProcess
        self.site: Site
        self.servers: list[DaphneServer] = []
        self.session = ""
        self.conversations: Iterator[int] = iter(())
        self.all_relayed: list[RelayedReply] = []
        self.meter = CpuMeter([])
        self.level_cpu: dict[int, CpuTally] = {}
        self.fit: dict[str, Any] = {}

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
        levels += 2 * options.samples  # the CPU fit's short (and maybe full) replies
        scenarios = len(options.coalescing()) * options.scenario_samples
        browser = sum(s.samples for s in options.browser_scenarios()) + 1 if options.browser else 0
        rolling = restart.runs_needed(scaleout=options.scaleout, quick=options.quick)
        return 2 + levels + scenarios + browser + rolling

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

    def relayed(
        self, specs: list[ReplySpec], cpu: CpuTally | None = None
    ) -> tuple[list[RelayedReply], float]:
        """One relayed round; with a tally, the daphne CPU of its runs is added to it: from the
        first message sent until the processes are quiet after the last done frame."""
        longest = max(spec.tokens * spec.pace_ms for spec in specs) / 1000
        timeout = 60 + 2 * longest + 0.2 * len(specs)
        targets = self.targets(len(specs))
        marks: dict[str, dict[int, float]] = {}

        def sending() -> None:
            marks["sending"] = self.meter.read()

        async def done() -> None:
            marks["done"] = await self.meter.quiet()

        async def measured() -> list[RelayedReply]:
            marks["start"] = await self.meter.quiet()
            replies = await relayed_round(
                targets, self.session, specs, limit=timeout, on_sending=sending, on_done=done
            )
            marks["end"] = await self.meter.quiet()
            return replies

        replies = asyncio.run(measured())
        if cpu is not None and {"sending", "done"} <= marks.keys():
            cpu.add(
                used(marks["sending"], marks["done"]),
                total(marks["end"]) - total(marks["start"]),
                len(replies),
                sum(spec.tokens for spec in specs),
            )
        self.all_relayed += replies
        return replies, wall(replies)

    def direct(self, specs: list[ReplySpec]) -> tuple[list[DirectReply], float]:
        replies = asyncio.run(direct_round("127.0.0.1", self.provider.port, specs))
        return replies, wall(replies)

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
        samples = LevelSamples(level, rounds, self.options.tokens)
        cpu = self.level_cpu[level] = CpuTally()
        for _ in range(rounds):
            replies, wall = self.direct([self.spec() for _ in range(level)])
            samples.direct += replies
            samples.direct_wall += wall
            time.sleep(0.1)
            profilers = self.profilers(f"c{level}")
            round_replies, wall = self.relayed([self.spec() for _ in range(level)], cpu)
            samples.profiles += [profiler.stop() for profiler in profilers]
            samples.relayed += round_replies
            samples.relayed_wall += wall
            records = self.provider_records()
            for reply in round_replies:
                record = records.get(reply.tag)
                if record is None:
                    continue
                if reply.first_token is not None and record["first_token_at"] is not None:
                    samples.latency_first.append(reply.first_token - record["first_token_at"])
                if reply.completed is not None and record["last_token_at"] is not None:
                    samples.latency_last.append(reply.completed - record["last_token_at"])
            time.sleep(0.1)
        samples.memory = {server.url: server.memory() for server in self.servers}
        figures = level_figures(samples, self.flush_interval)
        figures["server_cpu"] = tally_figures(cpu)
        return figures

    def cpu_fit(self, full: CpuTally | None) -> dict[str, Any]:
        """Concurrency 1, replies of a tenth of the length: with the full-length replies of
        concurrency 1 (run here too, alternating, when 1 is not a level), the line
        cpu = fixed + per_token x tokens through every round."""
        options = self.options
        short_tokens = options.cpu_short_tokens
        short = CpuTally()
        long = full if full is not None else CpuTally()
        if short_tokens < options.tokens:
            lengths = f"{short_tokens}" + ("" if full else f" and {options.tokens}")
            self.log(f"server CPU at concurrency 1: {options.samples} x {lengths} tokens")
            for _ in range(options.samples):
                if full is None:
                    self.relayed([self.spec()], long)
                self.relayed([self.spec(short_tokens)], short)
            self.provider_records()
        figures = fit_figures(long.points + short.points, REFERENCE_TOKENS)
        figures["short"] = tally_figures(short)
        figures["full"] = tally_figures(long)
        return figures

    def levels(self) -> list[dict[str, Any]]:
        """Every level, the CPU fit right after concurrency 1 (first when 1 is not a level);
        then every level's CPU figures with the fit's fixed cost per run."""
        results = []
        if 1 not in self.options.levels:
            self.fit = self.cpu_fit(None)
        for level in self.options.levels:
            results.append(self.level(level))
            if level == 1:
                self.fit = self.cpu_fit(self.level_cpu[1])
        for figures in results:
            tally = self.level_cpu[figures["level"]]
            figures["server_cpu"] = tally_figures(tally, self.fixed_ms())
        return results

    def fixed_ms(self) -> float | None:
        """The fit's fixed cost per run, when the fit can be read off at all."""
        return self.fit.get("fixed_ms") if self.fit.get("credible") else None

    def coalescing(self) -> list[dict[str, Any]]:
        results = []
        for tokens, pace_ms in self.options.coalescing():
            self.log(f"coalescing: {tokens} tokens at {pace_ms:g} ms/token, concurrency 1")
            direct: list[DirectReply] = []
            relayed: list[RelayedReply] = []
            cpu = CpuTally()
            for _ in range(self.options.scenario_samples):
                direct += self.direct([self.spec(tokens, pace_ms)])[0]
                relayed += self.relayed([self.spec(tokens, pace_ms)], cpu)[0]
            self.provider_records()
            figures = coalescing_figures(tokens, pace_ms, direct, relayed, self.flush_interval)
            figures["server_cpu"] = tally_figures(cpu, self.fixed_ms())
            results.append(figures)
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
        return [browser_figures(item["scenario"], item["direct"], item["screen"]) for item in raw]

    def rolling_restart(self) -> dict[str, Any]:
        """Last: it restarts the processes (bench/restart.py)."""
        count = restart.runs_needed(scaleout=True, quick=self.options.quick)
        conversations = [next(self.conversations) for _ in range(count)]
        return restart.measure(
            self.site, self.servers, self.provider.url, self.session, conversations, self.log
        )

    def execute(self) -> dict[str, Any]:
        options = self.options
        default = ReplySpec(
            tokens=options.tokens, pace_ms=options.pace_ms, tools=options.tool_rounds
        )
        results: dict[str, Any] = {}
        with ExitStack() as stack:
            self.provider = stack.enter_context(ProviderProcess(default=default))
            backend = "PostgreSQL + Redis" if options.scaleout else "SQLite"
            self.log(f"setting up the site: {backend}")
            self.site = stack.enter_context(
                open_site(self.provider.base_url, scaleout=options.scaleout)
            )
            self.session, ids = self.site.make_conversations(self.conversations_needed())
            self.conversations = iter(ids)
            results["db_writes"] = self.db_writes()
            self.log("provider connection over TLS: a new one per request against a kept one")
            results["provider_tls"] = tls_measure(50 if options.quick else 200)
            names = ", ".join(" ".join(command) for command in startup.COMMANDS)
            self.log(f"command start-up: {names}, {options.startup_samples} times each")
            results["startup"] = startup.measure(self.site, options.startup_samples)
            for _ in range(2 if options.scaleout else 1):
                self.servers.append(stack.enter_context(self.site.daphne()))
            self.meter = CpuMeter([server.pid for server in self.servers])
            self.warm_up()
            idle = self.meter.idle_rate()
            results["levels"] = self.levels()
            results["server_cpu"] = {
                "source": self.meter.source,
                "processes": len(self.servers),
                "idle_ms_per_s": idle * 1000,
                "reference_tokens": REFERENCE_TOKENS,
                "fit": self.fit,
            }
            results["coalescing"] = self.coalescing()
            results["browser"] = self.browser() if options.browser else None
            results["rolling_restart"] = self.rolling_restart() if options.scaleout else None
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


def _keep_log(server: DaphneServer) -> str:
    """Copy the log of a daphne that logged errors out of the temporary directory."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    target = Path(settings.VAR_DIR) / "bench" / f"{stamp}-daphne-{server.port}.log"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(server.log, target)
    return str(target)


def _flush_interval() -> float:
    try:
        from chat.frame_rate import FLUSH_INTERVAL
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
