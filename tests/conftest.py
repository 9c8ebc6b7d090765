from __future__ import annotations

import pytest
from django.conf import LazySettings

pytest_plugins = ["tests.fake_openai"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Browser tests last: sync Playwright leaves a running loop that breaks later async tests."""
    for item in items:
        if "page" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)
    items.sort(key=lambda item: "page" in getattr(item, "fixturenames", ()))


@pytest.fixture(autouse=True)
def _offline_provider(settings: LazySettings) -> None:
    """Tests never reach a provider configured in the environment, and never wait on pacing."""
    settings.OPENAI_BASE_URL = ""
    settings.OPENAI_API_KEY = ""
    settings.AGENTLAB_MODEL = ""
    settings.AGENTLAB_SCRIPTED_DELAY = 0
