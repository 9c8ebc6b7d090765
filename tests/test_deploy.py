from __future__ import annotations

import os
import secrets
import subprocess
import sys

from chat.testing.processes import ROOT


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    unset = {"DEBUG", "SECRET_KEY", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    environment = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_check_deploy_is_clean_with_production_settings() -> None:
    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="agentlab.example.com",
        AGENTLAB_HTTPS="true",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_flags_a_plain_http_setup() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING", DEBUG="false")
    assert result.returncode != 0
    assert "SECURE_SSL_REDIRECT" in result.stderr + result.stdout
