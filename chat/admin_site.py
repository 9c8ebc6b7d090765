"""The admin site: Django's, with the lab's pages that are not lists of records (Usage) among
the Agent Lab app's entries.

Outside the `chat.admin` package on purpose: Django builds the default site from this class
when something first registers with it, which `chat.admin` does as it is imported.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest
from django.urls import URLPattern, URLResolver, path, reverse


class LabAdminConfig(AdminConfig):
    """Django's admin app, on the lab's site (in settings' INSTALLED_APPS in its place)."""

    default_site = "chat.admin_site.LabAdminSite"


class LabAdminSite(admin.AdminSite):
    def get_urls(self) -> list[URLResolver | URLPattern]:
        from chat.admin.usage import usage_view

        usage = path("chat/usage/", self.admin_view(usage_view), name="chat_usage")
        return [usage, *super().get_urls()]

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[Any]:
        """The apps and their models, and the Usage page first in Agent Lab's, for those who
        may see it."""
        from chat.admin.usage import may_see

        apps = super().get_app_list(request, app_label)
        if not may_see(request.user):
            return apps
        for app in apps:
            if app["app_label"] == "chat":
                app["models"].insert(0, usage_entry())
        return apps


def usage_entry() -> dict[str, Any]:
    """The Usage page as the admin's app list shows a model: a name and a View link."""
    return {
        "name": "Usage",
        "object_name": "Usage",
        "admin_url": reverse("admin:chat_usage"),
        "add_url": None,
        "view_only": True,
        "perms": {"view": True},
        "model": None,
    }
