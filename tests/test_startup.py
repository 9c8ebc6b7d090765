"""Tests of chat.startup: what a server process loads and freezes as it starts, and what a
command that needs no server leaves unloaded."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from chat.startup import GC_THRESHOLD, freeze_start_up_objects
from chat.testing.processes import ROOT

SERVER_ONLY = ("mcp", "httpx2", "twisted", "daphne.server")
"""Imported by what connects to an MCP server (the SDK, its HTTP client) or serves (Twisted,
daphne's server): half a second of every command's start-up before they were left out."""


@pytest.fixture
def collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_start_up_objects_are_frozen_and_young_ones_collected_less_often(
    collector: None,
) -> None:
    freeze_start_up_objects()
    assert gc.get_freeze_count() > 10_000  # Django, the URLconf and the hot templates
    assert gc.get_threshold() == GC_THRESHOLD
    assert GC_THRESHOLD[0] > 700  # Python's default: a collection every few tokens


def loaded_after(code: str) -> set[str]:
    """The modules a new process holds after Django's setup and `code`."""
    script = "\n".join(
        ["import django, json, sys", "django.setup()", code, "print(json.dumps(list(sys.modules)))"]
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "agentlab_site.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.splitlines()[-1]))


def test_commands_and_the_checks_import_no_mcp_sdk_and_no_server() -> None:
    code = """
from django.core.management import call_command, get_commands, load_command_class
commands = [name for name, app in get_commands().items() if app == "chat"]
assert "cases" in commands, commands
for name in commands:
    load_command_class("chat", name)
call_command("check")
"""
    assert loaded_after(code) & set(SERVER_ONLY) == set()


def test_a_server_loads_the_mcp_sdk_before_its_first_run() -> None:
    loaded = loaded_after(
        "from chat.startup import freeze_start_up_objects\nfreeze_start_up_objects()"
    )
    assert {"mcp", "httpx2"} <= loaded
