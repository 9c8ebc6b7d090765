"""Smoke test of `manage.py bench --data` at a tiny size: it builds, serves, measures, reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chat.testing.processes import ROOT


@pytest.mark.slow
def test_bench_data_builds_measures_and_reports_every_figure(tmp_path: Path) -> None:
    output = tmp_path / "data.json"
    result = subprocess.run(
        [
            sys.executable, "manage.py", "bench", "--data",
            "--conversations", "13", "--long-turns", "3", "--quick", "--json", str(output),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(output.read_text())

    counts = report["counts"]
    # 5 seeds made through the runtime and 1 copy of each, light's copy, the long and the
    # import conversation.
    assert counts["conversations"] == 13 and counts["light"] == 1 and counts["heavy"] == 11
    assert counts["messages"] == 11 * 12 + 3 * 4 + 2 * 4
    pages = report["pages"]
    assert {page["status"] for page in pages.values()} == {200}
    assert pages["search_rare"]["bytes"] > pages["search_none"]["bytes"]
    assert report["stored"]["first"]["turn"] == 1 and report["stored"]["last"]["turn"] == 3
    assert report["stored"]["first"]["calls"] == 2 and report["stored"]["first"]["bytes"] > 0
    assert report["export"]["all"]["conversations"] == 13
    assert report["export"]["all"]["peak_mb"] > 10
    imported = report["import"]
    assert imported["lines"] == 10 and min(imported["seconds"].values()) > 0
    # Ten lines against one: on a busy machine start-up noise can swallow the difference, and
    # then the report has no rate rather than a made-up one.
    assert imported["per_second"] is None or imported["per_second"] > 0
    verdicts = {target["name"]: target["status"] for target in report["targets"]}
    assert verdicts["long conversation page size"] == "met"
    assert verdicts["admin list"].startswith("not measured: stated at 50,000")
    assert verdicts["search, rare word"].startswith("not measured: stated on PostgreSQL")
    for line in ("Pages (median of 2", "sidebar search, rare word", "Export, --format full"):
        assert line in result.stdout
    assert "Targets" in result.stdout and f"JSON: {output}" in result.stdout
