"""Fixtures of the agents' tests: Support, an agent with a suite (chat.testing.agents)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from chat.models import Agent, ProviderProfile
from chat.testing import factories as make
from chat.testing.agents import local_profile, support_with_suite
from chat.testing.openai_server import FakeOpenAIServer


@pytest.fixture
def ada() -> User:
    return make.user("ada")


@pytest.fixture
def local(fake_openai: FakeOpenAIServer) -> ProviderProfile:
    return local_profile(fake_openai)


@pytest.fixture
def support(ada: User, local: ProviderProfile) -> Agent:
    return support_with_suite(ada, local)
