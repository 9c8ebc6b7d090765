"""The benchmark's report: every target met or missed, the tables, the JSON file."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings

STUTTER_MS = 100.0
"""A pause longer than this between two text updates of a streaming reply counts as stutter."""


def _target(
    name: str, limit: str, value: float | None, bound: float, unit: str = "ms"
) -> dict[str, Any]:
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
    db_runs = db.get("runs", [])
    counts = [run["writes"] - run.get("checkpoints", 0) for run in db_runs]
    targets.append(
        _target(
            "database writes per run, checkpoints aside, do not grow with reply length (max - min)",
            "0",
            float(max(counts) - min(counts)) if counts else None,
            0,
            "writes",
        )
    )
    interval = db.get("checkpoint_seconds") or 0
    over = [
        run.get("checkpoints", 0) - math.ceil((run.get("duration") or 0) / interval)
        for run in db_runs
        if interval
    ]
    targets.append(
        _target(
            "checkpoint writes per run <= its duration / AGENTLAB_CHECKPOINT_SECONDS",
            "0",
            float(max(over)) if over else None,
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
        + ", ".join(
            f"{run['tokens']:,} tokens: {run['writes']}"
            + (f" ({run['checkpoints']} checkpoints)" if run.get("checkpoints") else "")
            for run in db["runs"]
        )
        + (" — equal, checkpoints aside" if db["equal"] else " — NOT equal"),
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
    return Path(settings.VAR_DIR) / "bench" / f"{stamp}.json"


def write_json(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
