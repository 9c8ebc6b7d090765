"""The app under test: a fresh database, `manage.py` subprocesses and daphne processes.

Nothing here touches the developer's database or `var/`: SQLite lives in a temporary directory,
the scale-out database is created and dropped, and every process gets its own SECRET_KEY and
AGENTLAB_VAR_DIR.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.provider import MODEL

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = os.environ.get("AGENTLAB_BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432")
REDIS = os.environ.get("AGENTLAB_BENCH_REDIS", "redis://127.0.0.1:6379/6")
# Variables of the caller's environment that must not leak into the processes under test.
_CLEARED = ("DATABASE_URL", "REDIS_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "AGENTLAB_MODEL")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Site:
    """Environment shared by every process of one benchmark: database, channel layer, provider."""

    directory: Path
    database_url: str
    redis_url: str | None
    provider_url: str
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        base = {key: value for key, value in os.environ.items() if key not in _CLEARED}
        self.env = {
            **base,
            "DJANGO_SETTINGS_MODULE": "agentlab_site.settings",
            "PYTHONPATH": str(ROOT),
            "DATABASE_URL": self.database_url,
            "SECRET_KEY": secrets.token_urlsafe(40),
            "AGENTLAB_VAR_DIR": str(self.directory / "var"),
            "DEBUG": "false",
            "WHITENOISE_USE_FINDERS": "true",
            "OPENAI_BASE_URL": self.provider_url,
            "OPENAI_API_KEY": "bench-key",
            "AGENTLAB_MODEL": MODEL,
            "LOG_LEVEL": "WARNING",
            **({"REDIS_URL": self.redis_url} if self.redis_url else {}),
        }

    def run(self, *args: str, stdin: str | None = None, timeout: float = 300) -> str:
        result = subprocess.run(
            [sys.executable, *args],
            cwd=ROOT,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode:
            raise RuntimeError(f"{' '.join(args)} failed:\n{result.stderr[-3000:]}")
        return result.stdout

    def manage(self, *args: str, stdin: str | None = None) -> str:
        return self.run("manage.py", *args, stdin=stdin)

    def migrate(self) -> None:
        self.manage("migrate", "--noinput", "-v0")

    def make_conversations(self, count: int, username: str = "bench") -> tuple[str, list[int]]:
        """One user with a logged-in session and `count` conversations (all tools enabled)."""
        script = f"""
import json
from django.contrib.auth import get_user_model
from django.test import Client
from chat import runs
from chat.models import Conversation
user = get_user_model().objects.create_user({username!r}, password=None)
client = Client()
client.force_login(user)
parameters = runs.default_parameters()
conversations = []
for _ in range({count}):
    conversation = Conversation(owner=user)
    conversation.set_agent_parameters(parameters)
    conversations.append(conversation)
Conversation.objects.bulk_create(conversations)
ids = list(Conversation.objects.filter(owner=user).order_by("pk").values_list("pk", flat=True))
print(json.dumps([client.cookies["sessionid"].value, ids]))
"""
        session, ids = json.loads(self.manage("shell", stdin=script).strip().splitlines()[-1])
        return session, ids

    def daphne(self) -> Daphne:
        return Daphne(self)


class Daphne:
    """`python -m daphne agentlab_site.asgi:application` in its own session (pid = daphne)."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = site.directory / f"daphne-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> Daphne:
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                    "agentlab_site.asgi:application",
                ],
                cwd=ROOT,
                env=self.site.env,
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

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def memory(self) -> dict[str, int | None]:
        """VmHWM (peak resident set) and VmRSS of the daphne process, in kB."""
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

    def errors(self) -> list[str]:
        """Lines of the log that report an error or a traceback."""
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return [line for line in lines if "Traceback" in line or " ERROR " in line]

    def __enter__(self) -> Daphne:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextmanager
def sqlite_site(provider_url: str) -> Iterator[Site]:
    with tempfile.TemporaryDirectory(prefix="agentlab-bench-") as directory:
        path = Path(directory)
        site = Site(path, f"sqlite:///{path / 'bench.sqlite3'}", None, provider_url)
        site.migrate()
        yield site


@contextmanager
def scaleout_site(provider_url: str) -> Iterator[Site]:
    """A fresh PostgreSQL database (dropped after) and a flushed Redis database."""
    import psycopg
    import redis

    name = f"agentlab_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    redis.Redis.from_url(REDIS).flushdb()
    try:
        with tempfile.TemporaryDirectory(prefix="agentlab-bench-") as directory:
            site = Site(Path(directory), f"{POSTGRES}/{name}", REDIS, provider_url)
            site.migrate()
            yield site
    finally:
        redis.Redis.from_url(REDIS).flushdb()
        with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
