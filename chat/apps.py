from __future__ import annotations

from importlib import import_module

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate, pre_migrate


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Agent Lab"

    def ready(self) -> None:
        from chat.search_index import restore_sqlite_index, set_aside_sqlite_index

        pre_migrate.connect(set_aside_sqlite_index, sender=self)
        post_migrate.connect(restore_sqlite_index, sender=self)
        for module in settings.AGENTLAB_TOOL_MODULES:
            import_module(module)


class DaphneConfig(AppConfig):
    """daphne as an app (its `runserver`), without importing its server at start-up.

    daphne's own config imports the server, and with it Twisted, TLS and autobahn, so that
    the asyncio reactor is installed before anything imports another: every command and test
    process paid a fifth of a second for it. What serves imports the server before anything
    else (daphne's `runserver` and its test server, `chat.serve`), and nothing else here
    touches Twisted.
    """

    name = "daphne"
    verbose_name = "Daphne"
    default = False  # `chat` names ChatConfig, not this one
