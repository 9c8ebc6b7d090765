"""`manage.py bench --data`: pages, search, admin, storage, export and import on a big database.

The database is built by bench/data.py (in the site's environment, against the bench provider),
or reused when `--data-db` names one that was built before (a PostgreSQL database, with
`--scaleout`, or a SQLite file): building 50,000 conversations takes minutes. One daphne serves
it with DEBUG=false; an HTTP client logged in as `light`, `heavy` or `staff` times each page
(one warm-up request, then the median of the samples) and counts its bytes. Export memory is the
peak RSS of `export_transcripts --format full` for one member's conversations, for the long
conversation alone and for all of them; the import rate is that of `import_transcripts` over
copies of a conversation of about 50 KB (1 line against many: the start-up is left out).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.provider import ProviderProcess
from bench.site import POSTGRES, provider_env
from chat.testing.site import Site, sqlite_site

Log = Callable[[str], None]

RSS_WRAPPER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.exit(code)\n"
)
"""Runs a command and prints its peak RSS in KiB (the largest child this wrapper waited for)."""


@dataclass
class Options:
    conversations: int = 5000
    messages: int | None = None
    long_turns: int = 300
    scaleout: bool = False
    database: str | None = None
    samples: int = 5
    import_lines: int = 100
    command: str = ""


@contextmanager
def open_data_site(options: Options, env: dict[str, str]) -> Iterator[tuple[Site, bool]]:
    """The site and whether its database is already built. A database named by `--data-db` is
    kept; without one, SQLite lives in a temporary directory and PostgreSQL is dropped after."""
    if options.database is None and not options.scaleout:
        with sqlite_site(env) as site:
            yield site, False
        return
    with tempfile.TemporaryDirectory(prefix="agentlab-data-") as directory:
        if not options.scaleout:
            path = Path(options.database or "").resolve()
            site = Site(Path(directory), f"sqlite:///{path}", None, env)
            site.migrate()
            yield site, _built(site)
            return
        import psycopg

        name = options.database or f"agentlab_bench_data_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
            found = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
            if not found.fetchone():
                admin.execute(f'CREATE DATABASE "{name}"')
        try:
            site = Site(Path(directory), f"{POSTGRES}/{name}", None, env)
            site.migrate()
            yield site, _built(site)
        finally:
            if options.database is None:
                with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _built(site: Site) -> bool:
    script = (
        "from django.db import connection\n"
        "print('bench_data_info' in connection.introspection.table_names())\n"
    )
    return site.manage("shell", stdin=script).strip().endswith("True")


def timed(client: httpx.Client, url: str, samples: int) -> dict[str, Any]:
    """The median time of `samples` GETs after one warm-up, and the body's bytes."""
    client.get(url)
    times, size, status = [], 0, 0
    for _ in range(samples):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        size, status = len(response.content), response.status_code
    return {"url": url, "ms": statistics.median(times), "bytes": size, "status": status}


def pages(
    server_url: str, built: dict[str, Any], words: dict[str, str], samples: int, log: Log
) -> dict[str, Any]:
    """Every page of the scenario, each as the user who would open it."""
    cookies = built["sessions"]
    heavy, light = built["heavy_conversation"], built["light_conversation"]
    long = built["long_conversation"]
    wanted = {
        "light_page": ("light", f"/c/{light}/"),
        "heavy_page": ("heavy", f"/c/{heavy}/"),
        "long_page": ("heavy", f"/c/{long}/"),
        **{
            f"search_{kind}": ("heavy", f"/search/?q={word}&current={heavy}")
            for kind, word in words.items()
        },
        "admin_list": ("staff", "/admin/chat/conversation/"),
        "admin_search": ("staff", f"/admin/chat/conversation/?q={words['rare']}"),
        "admin_transcript": ("staff", f"/admin/chat/conversation/{long}/change/"),
    }
    results = {}
    for name, (user, url) in wanted.items():
        log(f"{name}: {url} as {user}")
        with httpx.Client(
            base_url=server_url, cookies={"sessionid": cookies[user]}, timeout=120
        ) as client:
            results[name] = {"user": user, **timed(client, url, samples)}
    return results


def export_memory(site: Site, member: str, long: int, log: Log) -> dict[str, Any]:
    """Peak RSS and time of a full export of one member's conversations, of the long
    conversation alone (the largest record) and of all."""
    results = {}
    for name, extra in (
        ("member", ["--user", member]),
        ("long", ["--conversation", str(long)]),
        ("all", []),
    ):
        log(f"export memory: export_transcripts --format full {' '.join(extra)}")
        output = site.directory / "export.jsonl"
        started = time.perf_counter()
        peak = site.run(
            "-c", RSS_WRAPPER, sys.executable, "-m", "django", "export_transcripts",
            "--format", "full", "--no-progress", "--output", str(output), *extra,
            timeout=7200,
        )  # fmt: skip
        with output.open("rb") as lines:
            count = sum(1 for _ in lines)
        results[name] = {
            "conversations": count,
            "peak_mb": int(peak.strip().splitlines()[-1]) / 1024,
            "seconds": time.perf_counter() - started,
            "bytes": output.stat().st_size,
        }
        output.unlink()
    return results


def import_rate(site: Site, conversation: int, lines: int, log: Log) -> dict[str, Any]:
    """Conversations a second `import_transcripts` stores, from copies of one full record; the
    imported conversations are deleted after (the database may be measured again)."""
    one = site.directory / "one.jsonl"
    site.manage(
        "export_transcripts", "--format", "full", "--no-progress",
        "--conversation", str(conversation), "--output", str(one),
    )  # fmt: skip
    line = one.read_bytes().strip()
    many = site.directory / "many.jsonl"
    many.write_bytes((line + b"\n") * lines)
    last = site.manage("shell", stdin=_LAST_ID).strip().splitlines()[-1]
    log(f"import rate: {lines} conversations of {len(line) / 1000:.0f} KB")
    seconds = {}
    for name, path in (("one", one), ("many", many)):
        started = time.perf_counter()
        site.manage("import_transcripts", str(path))
        seconds[name] = time.perf_counter() - started
    site.manage("shell", stdin=_DELETE_AFTER.format(last=last))
    spent = seconds["many"] - seconds["one"]
    return {
        "record_bytes": len(line),
        "lines": lines,
        "seconds": seconds,
        "per_second": (lines - 1) / spent if spent > 0 else None,
    }


_LAST_ID = "from chat.models import Conversation\nprint(Conversation.objects.latest('pk').pk)\n"
_DELETE_AFTER = (
    "from chat.models import Conversation\nConversation.objects.filter(pk__gt={last}).delete()\n"
)


def run(options: Options, log: Log) -> dict[str, Any]:
    """Build (or reuse) the database, serve it, measure; the report without its targets."""
    from bench import data

    started = time.monotonic()
    load_before = [round(value, 2) for value in os.getloadavg()]
    words = {"rare": data.RARE_WORD, "common": data.COMMON_WORD, "none": data.NO_HIT_WORD}
    with ExitStack() as stack:
        provider = stack.enter_context(ProviderProcess())
        env = provider_env(provider.base_url)
        site, reused = stack.enter_context(open_data_site(options, env))
        backend = "PostgreSQL" if options.scaleout else "SQLite"
        build_seconds = None
        if reused:
            log(f"reusing the built {backend} database {options.database}")
            step = ["sessions"]
        else:
            log(f"building {options.conversations:,} conversations on {backend}")
            step = ["build", "--base-url", provider.base_url]
            step += ["--conversations", str(options.conversations)]
            step += ["--long-turns", str(options.long_turns)]
            step += ["--messages", str(options.messages)] if options.messages else []
        build_started = time.perf_counter()
        built = json.loads(site.run("-m", "bench.data", *step, timeout=7200).splitlines()[-1])
        if not reused:
            build_seconds = time.perf_counter() - build_started
        log(f"rows: {built['counts']}")
        server = stack.enter_context(site.daphne())
        measured = pages(server.url, built, words, options.samples, log)
        errors = server.errors()[:20]
        exports = export_memory(site, built["member"], built["long_conversation"], log)
        imports = import_rate(site, built["import_conversation"], options.import_lines, log)
    return {
        "meta": {
            "command": options.command,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": _commit(),
            "database": backend,
            "reused": options.database if reused else None,
            "python": sys.version.split()[0],
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
            "loadavg_before": load_before,
            "loadavg_after": [round(value, 2) for value in os.getloadavg()],
            "build_s": build_seconds,
            "duration_s": round(time.monotonic() - started, 1),
        },
        "config": {
            "conversations": options.conversations,
            "messages": options.messages,
            "long_turns": built["long_turns"],
            "samples": options.samples,
            "words": words,
        },
        "counts": built["counts"],
        "pages": measured,
        "stored": built["stored"],
        "export": exports,
        "import": imports,
        "daphne_errors": errors,
    }


def _commit() -> str:
    from bench import runner

    return runner._commit()
