"""ASGI entry point: HTTP through Django, WebSockets through Channels (auth + origin check)."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentlab_site.settings")
django_asgi_app = get_asgi_application()

from chat.startup import (  # noqa: E402
    freeze_start_up_objects,
    recover_on_start,
    wind_up_runs_on_shutdown,
)

recover_on_start()
wind_up_runs_on_shutdown()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from chat.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
freeze_start_up_objects()
