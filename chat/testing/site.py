"""A throwaway site: its own database, var directory and SECRET_KEY, for servers under test."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from chat.testing.processes import ROOT, DaphneServer, site_environment

_CONVERSATIONS = """
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


@dataclass
class Site:
    """Environment shared by every process of one site: database, channel layer, settings.

    Nothing touches the developer's database or `var/`: every process gets this site's
    SECRET_KEY (so a session is valid on all of them) and AGENTLAB_VAR_DIR.
    """

    directory: Path
    database_url: str
    redis_url: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.env = {
            "SECRET_KEY": secrets.token_urlsafe(40),
            "AGENTLAB_VAR_DIR": str(self.directory / "var"),
            **self.env,
        }
        self.environment = site_environment(
            database_url=self.database_url, redis_url=self.redis_url, env=self.env
        )

    def run(self, *args: str, stdin: str | None = None, timeout: float = 300) -> str:
        """stdout of `python *args` in this site's environment; RuntimeError if it fails."""
        result = subprocess.run(
            [sys.executable, *args],
            cwd=ROOT,
            env=self.environment,
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
        """A management command (`python -m django`: an installed app has no manage.py)."""
        return self.run("-m", "django", *args, stdin=stdin)

    def migrate(self) -> None:
        self.manage("migrate", "--noinput", "-v0")

    def make_conversations(self, count: int, username: str = "bench") -> tuple[str, list[int]]:
        """One user with a logged-in session and `count` conversations (all tools enabled)."""
        script = _CONVERSATIONS.format(username=username, count=count)
        session, ids = json.loads(self.manage("shell", stdin=script).strip().splitlines()[-1])
        return session, ids

    def sql(self, query: str) -> list[tuple[object, ...]]:
        """The rows of a query on this site's PostgreSQL database."""
        import psycopg

        with psycopg.connect(self.database_url) as connection:
            return connection.execute(query).fetchall()

    def daphne(self) -> DaphneServer:
        return DaphneServer(
            database_url=self.database_url,
            redis_url=self.redis_url,
            env=self.env,
            log_dir=self.directory,
        )


@contextmanager
def sqlite_site(env: Mapping[str, str] | None = None) -> Iterator[Site]:
    """A migrated SQLite database in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="agentlab-site-") as directory:
        path = Path(directory)
        site = Site(path, f"sqlite:///{path / 'site.sqlite3'}", None, dict(env or {}))
        site.migrate()
        yield site


@contextmanager
def beside_sqlite(site: Site, script: str) -> Iterator[dict[str, Site]]:
    """`site` (PostgreSQL) and a fresh SQLite site, each filled by the same `manage.py shell`
    script: the two backends compared on the same rows."""
    with sqlite_site() as lite:
        for each in (lite, site):
            each.manage("shell", "-c", script)
        yield {"sqlite": lite, "postgresql": site}


@contextmanager
def postgres_site(
    postgres: str, redis_url: str, env: Mapping[str, str] | None = None
) -> Iterator[Site]:
    """A fresh PostgreSQL database on the server `postgres` (dropped after) and a flushed Redis."""
    import psycopg
    import redis

    name = f"agentlab_site_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{postgres}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    redis.Redis.from_url(redis_url).flushdb()
    try:
        with tempfile.TemporaryDirectory(prefix="agentlab-site-") as directory:
            site = Site(Path(directory), f"{postgres}/{name}", redis_url, dict(env or {}))
            site.migrate()
            yield site
    finally:
        redis.Redis.from_url(redis_url).flushdb()
        with psycopg.connect(f"{postgres}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
