"""Optional sampling profile of daphne during a phase, with py-spy when it is installed.

`manage.py bench --profile` records every concurrency level's relayed rounds in py-spy's raw
(folded) format, one file per level and process, and keeps a summary in the JSON: where the
samples were (own time) and which of the project's functions they were under (inclusive).
Install py-spy with `.venv/bin/pip install py-spy`; the folded files open in speedscope or
`flamegraph.pl`.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

PROJECT_MARKERS = ("chat/", "agentlab_site/")


def py_spy() -> str | None:
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


class Profiler:
    """py-spy recording one process until stopped."""

    def __init__(self, pid: int, output: Path, *, rate: int = 200) -> None:
        self.pid = pid
        self.output = output
        self.rate = rate
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Profiler:
        executable = py_spy()
        if executable is None:
            raise RuntimeError("py-spy is not installed: .venv/bin/pip install py-spy")
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                executable, "record", "--pid", str(self.pid), "--rate", str(self.rate),
                "--format", "raw", "--output", str(self.output), "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        return self

    def stop(self) -> dict[str, Any]:
        if self.process is None:
            return {}
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        return summarize(self.output)


def summarize(path: Path, top: int = 15) -> dict[str, Any]:
    """Own time by function and inclusive time by project function, as sample counts."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {"file": str(path), "samples": 0}
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        samples = int(count)
        total += samples
        frames = stack.split(";")
        own[_name(frames[-1])] += samples
        for frame in {_name(f) for f in frames if any(m in f for m in PROJECT_MARKERS)}:
            inclusive[frame] += samples
    return {
        "file": str(path),
        "samples": total,
        "own": own.most_common(top),
        "project_inclusive": inclusive.most_common(top),
    }


def _name(frame: str) -> str:
    """`function (path/to/file.py:12)` -> `function (file.py)`."""
    function, _, where = frame.partition(" (")
    file = where.rsplit("/", 1)[-1].split(":", 1)[0] if where else ""
    return f"{function} ({file})" if file else function
