"""Smoke test of `manage.py bench` at tiny sizes: it runs end to end and its report holds up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.cpu import (
    CpuTally,
    clock_seconds,
    cpu_source,
    fit_figures,
    linear_fit,
    parse_stat,
    process_clock,
    scaled_reply_ms,
    stat_seconds,
    tally_figures,
)
from bench.report import capacity_targets, cpu_targets, startup_targets
from bench.stats import check_tokens, percentile, summary
from chat.testing.processes import ROOT


@pytest.mark.slow
def test_bench_runs_end_to_end_and_reports_every_figure(tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    result = subprocess.run(
        [
            sys.executable, "manage.py", "bench",
            "--levels", "1,3", "--tokens", "50", "--no-browser", "--quick",
            "--json", str(output),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Targets" in result.stdout
    report = json.loads(output.read_text())

    assert {"meta", "config", "db_writes", "levels", "coalescing", "targets"} <= report.keys()
    assert report["browser"] is None
    assert [level["level"] for level in report["levels"]] == [1, 3]
    for level in report["levels"]:
        relayed, direct = level["relayed"], level["direct"]
        assert relayed["unfinished"] == 0 and not relayed["notices"] and not direct["errors"]
        for totals in (relayed["tokens"], relayed["final_text"], direct["tokens"]):
            assert totals["lost"] == totals["duplicated"] == totals["reordered"] == 0
            assert totals["garbled"] == totals["inexact"] == 0
        assert relayed["ttft_ms"]["p50"] > 0 and relayed["total_ms"]["p99"] > 0
        assert relayed["frames"]["p50"] >= 3 and relayed["bytes"]["p50"] > 0
        assert level["overhead_ms"]["ttft"]["p50"] is not None
        assert level["relay_latency_ms"]["first_token"]["n"] == level["samples"]
        assert any(memory["VmHWM"] for memory in level["memory_kb"].values())
    assert report["correctness"]["lost"] == report["correctness"]["unfinished"] == 0
    assert {s["tokens_check"]["lost"] for s in report["coalescing"]} == {0}

    db = report["db_writes"]
    assert [run["tokens"] for run in db["runs"]] == [100, 1000, 10000]
    assert db["equal"]
    assert len({run["writes"] - run["checkpoints"] for run in db["runs"]}) == 1
    assert all(run["status"] == "completed" and run["stored_text"]["exact"] for run in db["runs"])

    names = {target["name"]: target for target in report["targets"]}
    assert len(names) >= 9
    grow = "database writes per run, checkpoints aside, do not grow with reply length (max - min)"
    assert names[grow]["met"]
    assert names["checkpoint writes per run <= its duration / AGENTLAB_CHECKPOINT_SECONDS"]["met"]
    assert all(server["errors"] == [] for server in report["daphne"])

    cpu = report["server_cpu"]
    assert cpu["source"] in {"clock", "proc"} and cpu["processes"] == 1
    assert cpu["fit"]["tokens"] == [5, 50] and cpu["fit"]["points"] == 6
    for level in report["levels"]:
        figures = level["server_cpu"]
        assert figures["runs"] == level["samples"] and figures["tokens"] == 50 * figures["runs"]
        assert figures["ms_per_run"] > 0 and figures["us_per_token"] > 0
    assert all(s["server_cpu"]["runs"] == 1 for s in report["coalescing"])
    tls = report["provider_tls"]
    assert tls["new_connection_ms"] > tls["kept_connection_ms"] > 0
    assert "Provider connection over TLS" in result.stdout
    assert names["server CPU per relayed token, c=1"]["met"] is not None
    startup = report["startup"]
    assert [command["command"] for command in startup["commands"]] == [
        "manage.py cases list",
        "manage.py check",
    ]
    assert all(
        command["wall_ms"]["n"] == startup["samples"] == 2 for command in startup["commands"]
    )
    assert all(command["cpu_ms"]["p50"] > 0 for command in startup["commands"])
    assert names["start-up of manage.py cases list (wall p50)"]["met"] is not None
    assert "Command start-up" in result.stdout


def test_start_up_targets_say_met_or_missed_by_how_much() -> None:
    def command(name: str, wall_p50: float) -> dict[str, Any]:
        return {"command": name, "wall_ms": {"p50": wall_p50}, "cpu_ms": {"p50": wall_p50}}

    startup = {"target_ms": 1500.0, "commands": [command("manage.py cases list", 1200.0)]}
    startup["commands"].append(command("manage.py check", 2100.0))
    met, missed = startup_targets({"startup": startup})
    assert (met["name"], met["target"], met["status"]) == (
        "start-up of manage.py cases list (wall p50)",
        "<= 1,500 ms",
        "met",
    )
    assert missed["status"] == "missed by 600.0 ms"
    assert startup_targets({}) == []


def test_token_check_counts_lost_duplicated_and_reordered_tokens() -> None:
    assert check_tokens("t0 t1 t2 t3", 4).ok
    check = check_tokens("t0 t2 t1 t1 t3x", 5)
    assert (check.lost, check.duplicated, check.reordered, check.garbled) == (2, 1, 1, 1)
    assert not check.exact


def test_percentiles_interpolate() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert summary([None, 10.0])["p99"] == 10.0
    assert summary([])["n"] == 0


def test_proc_stat_line_gives_user_plus_system_seconds() -> None:
    # The command name may hold spaces and parentheses: fields are counted from the last ')'.
    line = (
        "4242 (python -m (x)) S 1 4242 4242 0 -1 4194560 6115 0 0 0 "
        "250 37 4 1 20 0 3 0 1234 567890 1234 18446744073709551615"
    )
    assert parse_stat(line, 100) == pytest.approx(2.87)
    assert parse_stat(line, 250) == pytest.approx(287 / 250)


def test_the_cpu_of_this_process_reads_the_same_from_its_clock_and_proc() -> None:
    pid = os.getpid()
    if cpu_source(pid) != "clock":
        pytest.skip("no process CPU clock here")
    assert process_clock(pid) < 0
    clock, stat = clock_seconds(pid), stat_seconds(pid)
    assert stat <= clock + 0.05 and clock <= stat + 0.05 + 1.0 / os.sysconf("SC_CLK_TCK")


def test_linear_fit_finds_fixed_cost_and_cost_per_token() -> None:
    points = [(50.0, 0.010 + 50 * 30e-6), (500.0, 0.010 + 500 * 30e-6), (50.0, 0.0115)]
    fit = linear_fit(points)
    assert fit is not None
    intercept, slope = fit
    # Two lengths: the line passes through the mean of each.
    assert intercept + 50 * slope == pytest.approx(0.0115)
    assert intercept + 500 * slope == pytest.approx(0.025)
    assert linear_fit([(500.0, 0.02), (500.0, 0.03)]) is None
    assert linear_fit([]) is None

    figures = fit_figures([(50.0, 0.0115), (500.0, 0.025)], 500)
    assert figures["fixed_ms"] == pytest.approx(10.0)
    assert figures["us_per_token"] == pytest.approx(30.0)
    assert figures["ms_per_reference_reply"] == pytest.approx(25.0)
    assert figures["tokens"] == [50, 500] and figures["residual_ms"] == pytest.approx(0.0)
    assert figures["credible"] and figures["us_per_token_se"] is None

    # Noise larger than the tokens' cost: a slope within two standard errors of 0 is no reading.
    noisy = fit_figures([(5.0, 0.030), (5.0, 0.040), (50.0, 0.036), (50.0, 0.034)], 500)
    assert noisy["us_per_token"] == pytest.approx(0.0, abs=1e-6)
    assert noisy["us_per_token_se"] > 0 and not noisy["credible"]
    clean = fit_figures([(20.0, 0.0301), (20.0, 0.0299), (200.0, 0.0501), (200.0, 0.0499)], 500)
    assert clean["credible"] and clean["us_per_token"] == pytest.approx(111.1, abs=0.1)
    assert clean["ms_per_reference_reply_se"] > clean["us_per_token_se"] / 1000


def test_cpu_tally_gives_ms_per_run_and_us_per_token() -> None:
    tally = CpuTally()
    tally.add({1: 0.020, 2: 0.010}, round_seconds=0.036, replies=2, tokens=1000)
    tally.add({1: 0.015}, round_seconds=0.018, replies=1, tokens=500)
    figures = tally_figures(tally, fixed_ms=5.0)
    assert figures["runs"] == 3 and figures["tokens"] == 1500
    assert figures["ms"] == pytest.approx(45.0)
    assert figures["ms_per_run"] == pytest.approx(15.0)
    assert figures["us_per_token"] == pytest.approx(30.0)
    assert figures["us_per_token_beyond_fixed"] == pytest.approx(20.0)
    assert figures["sockets_ms_per_run"] == pytest.approx(3.0)
    assert figures["by_process_ms"] == {"1": pytest.approx(35.0), "2": pytest.approx(10.0)}
    assert [tokens for tokens, _ in tally.points] == [500.0, 500.0]
    assert [seconds for _, seconds in tally.points] == pytest.approx([0.015, 0.015])
    assert tally_figures(CpuTally())["ms_per_run"] is None
    # 200-token runs of 12 ms with 6 ms fixed: 6 + 6 x 500 / 200 for 500 tokens.
    assert scaled_reply_ms(12.0, 200, 6.0, 500) == pytest.approx(21.0)
    assert scaled_reply_ms(12.0, 200, None, 500) is None


def _report(
    *, mode: str = "1 daphne, SQLite", pace_ms: float = 20.0, tokens: int = 200
) -> dict[str, Any]:
    def level(number: int, ms_per_run: float, us_per_token: float) -> dict[str, Any]:
        return {
            "level": number,
            "relayed": {
                "tokens": {"lost": 0, "duplicated": 0, "reordered": 0, "garbled": 0},
                "unfinished": 0,
            },
            "overhead_ms": {"ttft": {"p50": 5.0, "p99": 300.0}, "total": {"p50": 9, "p99": 9}},
            "ratio": {"ttft": {"p50": 2.0, "p99": 2.0}, "total": {"p50": 1.02, "p99": 1.1}},
            "server_cpu": {"ms_per_run": ms_per_run, "us_per_token": us_per_token},
        }

    fit = {"fixed_ms": 6.0, "us_per_token": 20.0, "tokens": [20, 200], "credible": True}
    fit["ms_per_reference_reply"] = 16.0
    return {
        "meta": {"mode": mode},
        "config": {"tokens": tokens, "pace_ms": pace_ms},
        "levels": [level(1, 10.0, 50.0), level(200, 12.0, 60.0)],
        "server_cpu": {"reference_tokens": 500, "fit": fit},
        "browser": [
            {"tokens": 200, "pace_ms": 0.0, "tool_rounds": 0, "overhead_ms": {"first": 14.0}},
            {"tokens": 100, "pace_ms": 0.0, "tool_rounds": 1, "overhead_ms": {"done": 31.5}},
        ],
    }


def test_cpu_targets_read_the_fit_at_c1_and_scale_the_highest_level() -> None:
    targets = {target["name"]: target for target in cpu_targets(_report())}
    reply = targets["server CPU per 500-token reply, c=1 (fit at 20 and 200 tokens)"]
    assert (reply["value"], reply["met"], reply["status"]) == (16.0, False, "missed by 1.0 ms")
    top = targets["server CPU per 500-token reply, c=200 (scaled from 200; fixed part from c=1)"]
    assert top["value"] == pytest.approx(21.0) and top["met"] is False
    token = targets["server CPU per relayed token, c=1"]
    assert (token["value"], token["target"], token["status"]) == (
        50.0,
        "<= 30 µs",
        "missed by 20.0 µs",
    )
    assert targets["server CPU per relayed token, c=200"]["value"] == 60.0

    # At the reference length the figure is the measured one, not the fit.
    at_500 = {target["name"]: target for target in cpu_targets(_report(tokens=500))}
    assert at_500["server CPU per 500-token reply, c=1"]["value"] == 10.0
    assert at_500["server CPU per 500-token reply, c=200"] == {
        "name": "server CPU per 500-token reply, c=200",
        "target": "<= 15 ms",
        "value": 12.0,
        "unit": "ms",
        "met": True,
        "status": "met",
    }


def test_capacity_targets_state_their_load_and_say_why_not_measured() -> None:
    targets = {target["name"]: target for target in capacity_targets(_report())}
    load = "c=200 at 20 ms/token"
    assert targets[f"1 process, {load}: first-token overhead p99"]["status"] == "missed by 50.0 ms"
    ratio = targets[f"1 process, {load}: relayed complete p50 / direct p50"]
    assert (ratio["value"], ratio["met"]) == (1.02, True)
    assert targets[f"1 process, {load}: lost + duplicated + reordered tokens"]["met"] is True
    two = targets[f"2 processes, {load}: first-token overhead p99"]
    assert two["met"] is None and two["status"] == "not measured: a --scaleout run"
    first = targets["browser: first token on screen vs direct (p50), capacity target"]
    assert first["met"] is True
    tool = targets["browser: a tool round + 100 tokens complete on screen vs direct (p50)"]
    assert tool["status"] == "missed by 1.5 ms"

    full_speed = {t["name"]: t for t in capacity_targets(_report(pace_ms=0.0))}
    assert full_speed[f"1 process, {load}: first-token overhead p99"]["status"] == (
        "not measured: needs --levels ...,200 --pace-ms 20"
    )
    scaled_out = {t["name"]: t for t in capacity_targets(_report(mode="scaleout: 2 daphne"))}
    assert scaled_out[f"2 processes, {load}: first-token overhead p99"]["status"] == "met"
    assert scaled_out[f"1 process, {load}: first-token overhead p99"]["met"] is None


def test_cpu_targets_do_not_read_a_noisy_fit_off_at_500_tokens() -> None:
    report = _report()
    report["server_cpu"]["fit"].update(credible=False, us_per_token=-78.0, us_per_token_se=60.0)
    targets = {target["name"]: target for target in cpu_targets(report)}
    reply = targets["server CPU per 500-token reply, c=1 (fit at 20 and 200 tokens)"]
    assert reply["met"] is None and "too noisy (-78 ± 60 µs per token" in reply["status"]
    top = targets["server CPU per 500-token reply, c=200 (scaled from 200; fixed part from c=1)"]
    assert top["met"] is None
    assert targets["server CPU per relayed token, c=1"]["met"] is False
