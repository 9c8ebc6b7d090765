from __future__ import annotations

import pytest
from django.conf import LazySettings

pytest_plugins = ["tests.fake_openai"]


@pytest.fixture(autouse=True)
def _offline_provider(settings: LazySettings) -> None:
    """Tests never reach a provider configured in the environment, and never wait on pacing."""
    settings.OPENAI_BASE_URL = ""
    settings.OPENAI_API_KEY = ""
    settings.AGENTLAB_MODEL = ""
    settings.AGENTLAB_SCRIPTED_DELAY = 0
