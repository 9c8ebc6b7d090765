"""Smoke test of `manage.py bench` at tiny sizes: it runs end to end and its report holds up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_token_check_counts_lost_duplicated_and_reordered_tokens() -> None:
    assert check_tokens("t0 t1 t2 t3", 4).ok
    check = check_tokens("t0 t2 t1 t1 t3x", 5)
    assert (check.lost, check.duplicated, check.reordered, check.garbled) == (2, 1, 1, 1)
    assert not check.exact


def test_percentiles_interpolate() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert summary([None, 10.0])["p99"] == 10.0
    assert summary([])["n"] == 0
