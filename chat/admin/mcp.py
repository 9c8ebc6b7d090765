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
from django.utils.safestring import SafeString, mark_safe

from chat.agent import mcp as core
from chat.models import McpServer, McpTool
from chat.runs import mcp, mcp_config, mcp_prompts
from chat.runs.providers import key_status

from .base import BoundedJSONField, LabAdmin, ReadOnlyInline

REFRESH = "_refresh"
"""The change form's "Check and refresh tools" button: save, then ask the server."""
STDIO_FIELDS = ("command", "args", "env")
"""What only a superuser sets: the command this server runs, as its own user."""
STDIO_REFUSED = (
    "Only superusers may configure a stdio server: its command runs on this server, as the "
    "user that serves the site."
)
VARIABLES_HELP = (
    "Values come from the environment variables named here, never stored: a variable starting "
    "with AGENTLAB_MCP_KEY_, or one listed in AGENTLAB_MCP_KEY_VARIABLES. A provider's key "
    "(OPENAI_API_KEY, AGENTLAB_KEY_*) only if it is listed there."
)


def may_configure_stdio(user: Any) -> bool:
    """Whether `user` may set a stdio command: a superuser only, whatever their MCP
    permissions, since the command runs as the user that serves the site. `manage.py mcp` is
    the operator's, at the terminal."""
    return bool(user.is_superuser)


class McpServerForm(forms.ModelForm[McpServer]):
    """A server as staff configure it: the same rules as `manage.py mcp add`."""

    stdio_allowed = False
    """Set per request by the admin: `may_configure_stdio` of its user."""

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
        field_classes = {
            "headers": BoundedJSONField,
            "args": BoundedJSONField,
            "env": BoundedJSONField,
        }
        help_texts = {
            "transport": "Only superusers may choose stdio.",
            "command": "stdio: the program. Only superusers may set or change it (and its "
            "arguments and environment): it runs as the user that serves this site.",
        }

    def clean(self) -> dict[str, Any]:
        """The configuration's problems (`config_problems`), each on the field it is about.

        A user who is not a superuser sees the stdio fields read-only (they are not in the
        form), and may not make a server stdio: one that already is keeps its command.
        """
        cleaned = super().clean() or {}
        for field in ("headers", "args", "env"):
            if field in cleaned and cleaned[field] is None:  # left blank
                cleaned[field] = [] if field == "args" else {}
        transport = cleaned.get("transport")
        stdio = McpServer.Transport.STDIO
        was_stdio = not self.instance._state.adding and self.instance.transport == stdio
        if transport == stdio and not self.stdio_allowed and not was_stdio:
            self.add_error("transport", STDIO_REFUSED)
        if transport is None or self.errors:
            return cleaned
        timeout = cleaned.get("timeout")
        candidate = McpServer(
            transport=transport,
            timeout=core.DEFAULT_TIMEOUT if timeout is None else timeout,
            **{
                field: cleaned[field] if field in self.fields else getattr(self.instance, field)
                for field in mcp_config.STORED
            },
        )
        for problem in mcp.config_problems(candidate):
            named, _, text = problem.partition(": ")
            self.add_error(named if named in self.fields else None, text)
        return cleaned


class McpToolInline(ReadOnlyInline):
    model = McpTool
    fields = ("exposed_name", "name", "description", "available", "task_support")
    readonly_fields = fields
    show_change_link = False
    verbose_name_plural = "Tools (as the server listed them when last asked)"


STATUS_FIELDS = (
    "variables",
    "status",
    "error",
    "checked_at",
    "tool_count",
    "prompt_list",
    "updated_at",
)
"""What the admin shows of a server's state: read-only."""


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
        ("Streamable HTTP", {"fields": ("url", "headers"), "description": VARIABLES_HELP}),
        (
            "stdio",
            {
                "fields": STDIO_FIELDS,
                "description": "A command this server starts and talks to, as the user that "
                "serves this site: only superusers may add or change one. Environment values "
                "as for headers.",
            },
        ),
        ("Status", {"fields": STATUS_FIELDS}),
    )
    readonly_fields = STATUS_FIELDS

    def get_queryset(self, request: HttpRequest) -> QuerySet[McpServer]:
        queryset: QuerySet[McpServer] = super().get_queryset(request)
        return queryset.annotate(n_tools=Count("tools"))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        """The stdio command, its arguments and environment: read-only but to superusers."""
        fields = tuple(super().get_readonly_fields(request, obj))
        return fields if may_configure_stdio(request.user) else (*fields, *STDIO_FIELDS)

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        allowed = may_configure_stdio(request.user)
        return type(form.__name__, (form,), {"stdio_allowed": allowed})

    @admin.display(description="tools", ordering="n_tools")
    def tool_count(self, obj: McpServer) -> int:
        count = getattr(obj, "n_tools", None)
        return obj.tools.count() if count is None else count

    @admin.display(description="prompts")
    def prompt_list(self, obj: McpServer) -> SafeString | str:
        """What the composer offers as slash commands, as the server listed them when last
        asked."""
        rows = ((prompt.usage, prompt.description) for prompt in mcp_prompts.listed(obj))
        return format_html_join(mark_safe("<br>"), "<code>{}</code> {}", rows) or "—"

    @admin.display(description="variables")
    def variables(self, obj: McpServer) -> SafeString | str:
        """Each variable named, and whether it is set in this process (never its value)."""
        named = obj.headers if obj.transport == McpServer.Transport.HTTP else obj.env
        if not named:
            return "—"
        rows = (
            (name, variable, key_status(str(variable), mcp=True))
            for name, variable in named.items()
        )
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
