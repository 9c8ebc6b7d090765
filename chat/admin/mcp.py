"""MCP servers: settings staff edit (secrets stay in the environment), and the tools each lists."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from chat.agent import mcp as core
from chat.models import McpServer, McpTool
from chat.runs import mcp
from chat.runs.providers import key_status

from .base import LabAdmin, ReadOnlyInline

REFRESH = "_refresh"
"""The change form's "Check and refresh tools" button: save, then ask the server."""
FIELDS = ("url", "command", "timeout")
"""Fields a `config_problems` line may name first; other lines name a header or a variable."""
STDIO_REFUSED = (
    "Only staff who may change MCP servers can configure a stdio server: it runs a command "
    "on this server."
)


class McpServerForm(forms.ModelForm[McpServer]):
    """A server as staff configure it: the same rules as `manage.py mcp add`."""

    may_configure_stdio = False
    """Set per request by the admin: whether this user may change MCP servers."""

    class Meta:
        model = McpServer
        fields = (
            "name",
            "transport",
            "enabled",
            "timeout",
            "url",
            "headers",
            "command",
            "args",
            "env",
        )
        labels = {"url": "URL", "env": "Environment"}

    def clean_headers(self) -> dict[str, str]:
        return self._mapping("headers", "Authorization", "AGENTLAB_KEY_DOCS")

    def clean_env(self) -> dict[str, str]:
        return self._mapping("env", "DOCS_TOKEN", "AGENTLAB_KEY_DOCS")

    def clean_args(self) -> list[str]:
        value = self.cleaned_data.get("args") or []
        if not isinstance(value, list) or not all(isinstance(arg, str) for arg in value):
            raise forms.ValidationError('Enter a list of strings, e.g. ["-m", "docs_server"].')
        return value

    def _mapping(self, field: str, name: str, variable: str) -> dict[str, str]:
        value = self.cleaned_data.get(field) or {}
        if not isinstance(value, dict) or not all(
            isinstance(key, str) and isinstance(item, str) for key, item in value.items()
        ):
            raise forms.ValidationError(
                f'Enter an object of names and variable names, e.g. {{"{name}": "{variable}"}}.'
            )
        return value

    def clean(self) -> dict[str, Any]:
        """The configuration's problems (`config_problems`), each on the field it is about."""
        cleaned = super().clean() or {}
        transport = cleaned.get("transport")
        if transport == McpServer.Transport.STDIO and not self.may_configure_stdio:
            self.add_error("transport", STDIO_REFUSED)
            return cleaned
        if transport is None:
            return cleaned
        timeout = cleaned.get("timeout")
        candidate = McpServer(
            transport=transport,
            url=cleaned.get("url") or "",
            headers=cleaned.get("headers") or {},
            command=cleaned.get("command") or "",
            env=cleaned.get("env") or {},
            timeout=core.DEFAULT_TIMEOUT if timeout is None else timeout,
        )
        mapping = "headers" if transport == McpServer.Transport.HTTP else "env"
        for problem in mcp.config_problems(candidate):
            named, _, text = problem.partition(": ")
            if named in FIELDS:
                self.add_error(named, text)
            else:
                self.add_error(mapping, problem)
        return cleaned


class McpToolInline(ReadOnlyInline):
    model = McpTool
    fields = ("exposed_name", "name", "description", "available")
    readonly_fields = fields
    show_change_link = False
    verbose_name_plural = "Tools (as the server listed them when last asked)"


@admin.register(McpServer)
class McpServerAdmin(LabAdmin):
    """Editable, like provider profiles: header and environment values are read from the
    allowed variables named here, in the process that connects, and never stored or shown."""

    form = McpServerForm
    list_display = (
        "name",
        "transport",
        "target",
        "status",
        "error",
        "tool_count",
        "checked_at",
        "enabled",
    )
    list_filter = ("transport", "status", "enabled")
    search_fields = ("name", "url", "command")
    actions = ("check_and_refresh",)
    inlines = (McpToolInline,)
    fieldsets = (
        (None, {"fields": ("name", "transport", "enabled", "timeout")}),
        (
            "Streamable HTTP",
            {
                "fields": ("url", "headers"),
                "description": "Header values come from the environment variables named here: "
                "OPENAI_API_KEY, AGENTLAB_KEY_*, or one listed in AGENTLAB_KEY_VARIABLES.",
            },
        ),
        (
            "stdio",
            {
                "fields": ("command", "args", "env"),
                "description": "A command this server starts and talks to; only staff who may "
                "change MCP servers can configure one. Variables as for headers.",
            },
        ),
        (
            "Status",
            {"fields": ("variables", "status", "error", "checked_at", "tool_count", "updated_at")},
        ),
    )
    readonly_fields = ("variables", "status", "error", "checked_at", "tool_count", "updated_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[McpServer]:
        queryset: QuerySet[McpServer] = super().get_queryset(request)
        return queryset.annotate(n_tools=Count("tools"))

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        allowed = request.user.has_perm("chat.change_mcpserver")
        return type(form.__name__, (form,), {"may_configure_stdio": allowed})

    @admin.display(description="tools", ordering="n_tools")
    def tool_count(self, obj: McpServer) -> int:
        count = getattr(obj, "n_tools", None)
        return obj.tools.count() if count is None else count

    @admin.display(description="variables")
    def variables(self, obj: McpServer) -> SafeString | str:
        """Each variable named, and whether it is set in this process (never its value)."""
        named = obj.headers if obj.transport == McpServer.Transport.HTTP else obj.env
        if not named:
            return "—"
        rows = ((name, variable, key_status(str(variable))) for name, variable in named.items())
        return format_html_join(", ", "{} ← {} ({})", rows)

    @admin.action(description="Check and refresh tools", permissions=["change"])
    def check_and_refresh(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        self._refresh(request, list(queryset))

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> HttpResponse:
        if request.user.has_perm("chat.change_mcpserver"):
            context["refresh_button"] = REFRESH
        return super().render_change_form(request, context, *args, **kwargs)

    def response_add(
        self, request: HttpRequest, obj: McpServer, post_url_continue: str | None = None
    ) -> HttpResponse:
        if REFRESH in request.POST:
            return self._refreshed(request, obj)
        return super().response_add(request, obj, post_url_continue)

    def response_change(self, request: HttpRequest, obj: McpServer) -> HttpResponse:
        if REFRESH in request.POST:
            return self._refreshed(request, obj)
        return super().response_change(request, obj)

    def _refreshed(self, request: HttpRequest, obj: McpServer) -> HttpResponse:
        """Saved, then refreshed once the save is committed: the change view runs in a
        transaction, and the hub's database calls (`database_sync_to_async`) close a connection
        they find inside one."""
        self.message_user(request, f"{obj.name} saved.", messages.SUCCESS)
        transaction.on_commit(lambda: self._refresh(request, [obj]))
        return HttpResponseRedirect(reverse("admin:chat_mcpserver_change", args=[obj.pk]))

    def _refresh(self, request: HttpRequest, servers: Sequence[McpServer]) -> None:
        """Ask each server for its tools now (a hub of this request's own, closed after)."""
        results = async_to_sync(mcp.refresh_all)(servers)
        for server in servers:
            result = results[server.pk]
            if isinstance(result, core.McpUnavailable):
                self.message_user(request, f"{server.name} is down: {result}", messages.ERROR)
            else:
                text = f"{server.name} is up and lists {len(result)} tool(s)."
                self.message_user(request, text, messages.SUCCESS)
