from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from django.conf import LazySettings
from django.contrib.auth import get_user_model
from django.test import Client

from chat.runs import mcp as hub_module
from chat.testing import factories as make
from chat.testing.mcp_server import McpHttpServer
from chat.testing.openai_server import FakeOpenAIServer

SLOW = {"browser", "scaleout"}
"""Markers of tests that also get `slow`: `pytest -m "not slow"` is the quick inner loop."""
KEY_VARIABLES = [
    "MISTRAL_API_KEY",
    "MISTRAL_TEST_KEY",
    "DEEPSEEK_API_KEY",
    "CANARY_API_KEY",
    "MISSING_API_KEY",
    "UNSET_TEST_KEY",
    "VLLM_KEY",
    "ODD_PROVIDER_KEY",
]
"""The suite's AGENTLAB_KEY_VARIABLES: the key variables its profiles name, as an operator
would list them."""


def pytest_configure(config: pytest.Config) -> None:
    """Passwords made in tests are hashed quickly (chat/testing/hashers.py says why it is
    PBKDF2 still)."""
    from django.conf import settings

    settings.PASSWORD_HASHERS = [
        "chat.testing.hashers.QuickPBKDF2PasswordHasher",
        *settings.PASSWORD_HASHERS,
    ]


PLAYWRIGHT = {"page", "context", "browser"}
"""pytest-playwright's fixtures: a test that takes any of them starts sync Playwright."""


def _uses_playwright(item: pytest.Item) -> bool:
    return bool(PLAYWRIGHT & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Browser tests last: sync Playwright leaves a running loop that breaks later async tests
    (in every worker: a worker that ran one runs no other test after it)."""
    for item in items:
        if _uses_playwright(item):
            item.add_marker(pytest.mark.browser)
        if SLOW & set(item.keywords):
            item.add_marker(pytest.mark.slow)
    items.sort(key=_uses_playwright)


@pytest.fixture(autouse=True)
def _offline_provider(settings: LazySettings) -> None:
    """Tests never reach a provider configured in the environment, and never wait on pacing.

    Nor do they ask for titles unless they test them (tests/runs/test_titles.py): a title
    request after a first reply would take the response a test scripted for its next run.
    """
    settings.OPENAI_BASE_URL = ""
    settings.OPENAI_API_KEY = ""
    settings.AGENTLAB_MODEL = ""
    settings.AGENTLAB_SCRIPTED_DELAY = 0
    settings.AGENTLAB_TITLES = "off"
    settings.AGENTLAB_KEY_VARIABLES = KEY_VARIABLES
    settings.AGENTLAB_MCP_KEY_VARIABLES = []


@pytest.fixture(autouse=True)
def _media(settings: LazySettings, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Attached files go to a folder of the test's own, never the site's var/media."""
    settings.MEDIA_ROOT = tmp_path_factory.mktemp("media")


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """A started FakeOpenAIServer, stopped after the test."""
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def docs_http() -> Iterator[McpHttpServer]:
    """The example MCP server over streamable HTTP, shared by a module's tests."""
    with McpHttpServer("docs") as server:
        yield server


@pytest.fixture
async def hub(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[hub_module.Hub]:
    """A hub of this test's own (its connections live in this test's event loop)."""
    fresh = hub_module.Hub()
    monkeypatch.setattr(hub_module, "hub", fresh)
    yield fresh
    await fresh.close()


@pytest.fixture
def user() -> Any:
    return get_user_model().objects.create_user("ada", password="pw-123456789")


@pytest.fixture
def client_in(user: Any) -> Client:
    """A client logged in as `user`."""
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def staff(client: Client) -> Client:
    """The test client, logged in as a superuser."""
    client.force_login(make.user("root", is_staff=True, is_superuser=True))
    return client
