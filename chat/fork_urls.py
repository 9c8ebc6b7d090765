"""Fork pages, included by chat/urls.py under the "chat" namespace."""

from __future__ import annotations

from django.urls import path

from chat import fork_views

urlpatterns = [
    path("c/<int:pk>/fork/message/<int:index>/", fork_views.fork_message, name="fork_message"),
    path(
        "c/<int:pk>/fork/tool/<int:tool_call_pk>/",
        fork_views.fork_tool_call,
        name="fork_tool_call",
    ),
]
