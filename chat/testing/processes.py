"""Child processes for tests and the benchmark: free ports, managed process groups, daphne."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

import chat

ROOT = Path(chat.__file__).resolve().parent.parent
"""The project's checkout, or site-packages when the app is installed from a wheel."""

CLEARED = (
    "DATABASE_URL",
    "REDIS_URL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "AGENTLAB_MODEL",
    # The test process may allow sync ORM calls in async code; a server must not.
    "DJANGO_ALLOW_ASYNC_UNSAFE",
)
"""Variables of the caller's environment that must not leak into a process under test."""


def free_port() -> int:
    """A 127.0.0.1 port nobody listens on (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def site_environment(
    *, database_url: str, redis_url: str | None = None, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a process of this project serving `database_url`, as in production."""
    base = {key: value for key, value in os.environ.items() if key not in CLEARED}
    return {
        **base,
        "DJANGO_SETTINGS_MODULE": "agentlab_site.settings",
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": database_url,
        "DEBUG": "false",
        "WHITENOISE_USE_FINDERS": "true",
        **({"REDIS_URL": redis_url} if redis_url else {}),
        **(env or {}),
    }


class ManagedProcess:
    """A child process in a session of its own, so that stopping it stops all it started."""

    name = "process"
    stop_timeout = 10.0

    def __init__(self) -> None:
        self.process: subprocess.Popen[Any] | None = None

    def launch(self) -> subprocess.Popen[Any]:
        """Start the child with `start_new_session=True` (its pid is its process group)."""
        raise NotImplementedError

    def wait_ready(self, process: subprocess.Popen[Any]) -> None:
        """Return once the child serves; raise RuntimeError if it never will."""

    def start(self) -> Self:
        self.process = self.launch()
        try:
            self.wait_ready(self.process)
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError(f"the {self.name} is not started")
        return self.process.pid

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Signal the whole group, then SIGKILL it if it is still there after `stop_timeout`."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, sig)
        try:
            self.process.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=self.stop_timeout)

    def kill(self) -> None:
        """Die like a crashed server: no cleanup, no goodbye."""
        self.stop(signal.SIGKILL)

    def memory(self) -> dict[str, int | None]:
        """VmHWM (peak resident set) and VmRSS of the process, in kB (Linux)."""
        values: dict[str, int | None] = {"VmHWM": None, "VmRSS": None}
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                name, _, rest = line.partition(":")
                if name in values:
                    values[name] = int(rest.split()[0])
        except OSError:
            pass
        return values

    def reset_peak(self) -> bool:
        """Reset VmHWM to the current RSS (Linux clear_refs 5), so the next peak is per phase."""
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        except OSError:
            return False
        return True

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class DaphneServer(ManagedProcess):
    """`python -m chat.serve agentlab_site.asgi:application` (daphne, as in production) on a free
    127.0.0.1 port."""

    name = "daphne"
    start_timeout = 30.0

    def __init__(
        self,
        *,
        database_url: str,
        redis_url: str | None = None,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        log_dir: Path | None = None,
    ) -> None:
        super().__init__()
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (log_dir or ROOT / "var") / f"daphne-{self.port}.log"
        self.environment = site_environment(database_url=database_url, redis_url=redis_url, env=env)

    def launch(self) -> subprocess.Popen[Any]:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        # Started again (a restart on its port), it keeps the log of its last life.
        with self.log.open("wb" if self.process is None else "ab") as log:
            return subprocess.Popen(
                [
                    sys.executable, "-m", "chat.serve", "-b", "127.0.0.1", "-p", str(self.port),
                    "agentlab_site.asgi:application",
                ],
                cwd=ROOT,
                env=self.environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def wait_ready(self, process: subprocess.Popen[Any]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"daphne exited: {self.log.read_text()[-2000:]}")
            try:
                httpx.get(f"{self.url}/login/", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"daphne did not answer on {self.url}")

    def websocket_url(self, conversation: int) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/conversations/{conversation}/"

    def errors(self) -> list[str]:
        """Lines of the log that report an error or a traceback."""
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return [line for line in lines if "Traceback" in line or " ERROR " in line]
