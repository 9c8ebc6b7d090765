from __future__ import annotations

from importlib import import_module

from django.apps import AppConfig
from django.conf import settings


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Agent Lab"

    def ready(self) -> None:
        for module in settings.AGENTLAB_TOOL_MODULES:
            import_module(module)
