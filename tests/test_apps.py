"""Tests of chat.apps: the app configs named in INSTALLED_APPS."""

from __future__ import annotations

from django.apps import apps
from django.core.management import get_commands

from chat.apps import ChatConfig, DaphneConfig


def test_chat_is_configured_by_chat_config() -> None:
    assert isinstance(apps.get_app_config("chat"), ChatConfig)


def test_runserver_is_daphnes_which_comes_before_staticfiles() -> None:
    labels = [config.label for config in apps.get_app_configs()]
    assert isinstance(apps.get_app_config("daphne"), DaphneConfig)
    assert get_commands()["runserver"] == "daphne"
    assert labels.index("daphne") < labels.index("staticfiles")
