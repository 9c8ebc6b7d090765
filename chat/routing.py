from __future__ import annotations

from django.urls import path

from chat.consumers import ChatConsumer, EvalProgressConsumer

websocket_urlpatterns = [
    # Channels' URLRouter takes Django's path() with an ASGI application in place of a view.
    path("ws/conversations/<int:pk>/", ChatConsumer.as_asgi()),  # type: ignore[arg-type]
    path("ws/evals/<str:kind>/<int:pk>/", EvalProgressConsumer.as_asgi()),  # type: ignore[arg-type]
]
