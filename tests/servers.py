"""Real servers for tests: daphne processes of this project on free 127.0.0.1 ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DaphneServer:
    """`python -m daphne agentlab_site.asgi:application` in its own process group."""

    def __init__(
        self,
        *,
        database_url: str,
        redis_url: str | None = None,
        env: dict[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = ROOT / "var" / f"daphne-{self.port}.log"
        self.environment = {
            **os.environ,
            "DATABASE_URL": database_url,
            "DEBUG": "false",
            "WHITENOISE_USE_FINDERS": "true",
            "OPENAI_BASE_URL": "",
            "PYTHONPATH": str(ROOT),
            **({"REDIS_URL": redis_url} if redis_url else {}),
            **(env or {}),
        }
        if not redis_url:
            self.environment.pop("REDIS_URL", None)
        # The test process may allow sync ORM calls in async code; the server must not.
        self.environment.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> DaphneServer:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                    "agentlab_site.asgi:application",
                ],
                cwd=ROOT,
                env=self.environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daphne exited: {self.log.read_text()[-2000:]}")
            try:
                httpx.get(f"{self.url}/login/", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"daphne did not answer on {self.url}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, sig)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def kill(self) -> None:
        """Die like a crashed server: no cleanup, no goodbye."""
        self.stop(signal.SIGKILL)

    def __enter__(self) -> DaphneServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
