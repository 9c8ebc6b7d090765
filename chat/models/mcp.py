"""MCP servers, configured by staff, and the tools they list (cached here, refreshed on demand
and when a server says its list changed)."""

from __future__ import annotations

from collections.abc import Collection

from django.core.validators import RegexValidator
from django.db import models

from chat.agent.mcp import SEPARATOR
from chat.agent.tools import ToolDefinition

TASK_ONLY = "required"
"""A tool's `execution.taskSupport` when it runs only as an MCP task: not offered."""
WHOLE_SERVER = "*"
"""`<server>__*` in a conversation's tools: every tool that server lists, now and later."""
SERVER_NAME = RegexValidator(
    r"^[a-zA-Z0-9_-]{1,40}$", "Letters, digits, _ and - only (it starts every tool's name)."
)


class McpServer(models.Model):
    class Transport(models.TextChoices):
        HTTP = "http", "Streamable HTTP"
        STDIO = "stdio", "stdio (a command this server starts)"

    class Status(models.TextChoices):
        UNKNOWN = "unknown", "Not checked yet"
        UP = "up", "Up"
        DOWN = "down", "Down"

    name = models.CharField(max_length=40, unique=True, validators=[SERVER_NAME])
    transport = models.CharField(max_length=10, choices=Transport.choices)
    url = models.CharField(
        max_length=500, blank=True, help_text="Streamable HTTP: the endpoint, e.g. …/mcp."
    )
    headers = models.JSONField(
        default=dict,
        blank=True,
        help_text="Streamable HTTP: header name → the environment variable holding its value "
        "(the value itself is never stored).",
    )
    command = models.CharField(max_length=500, blank=True, help_text="stdio: the program.")
    args = models.JSONField(default=list, blank=True, help_text="stdio: its arguments.")
    env = models.JSONField(
        default=dict,
        blank=True,
        help_text="stdio: variable name → the environment variable holding its value.",
    )
    timeout = models.FloatField(default=60.0, help_text="Seconds a tool call may take.")
    prompts = models.JSONField(
        default=list,
        blank=True,
        help_text="The prompts it lists (name, title, description, arguments), as last asked.",
    )
    enabled = models.BooleanField(default=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.UNKNOWN)
    error = models.TextField(blank=True, help_text="Why it could not be reached, last time.")
    checked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name

    @property
    def target(self) -> str:
        """Where it is: its URL, or its command line."""
        if self.transport == self.Transport.HTTP:
            return self.url
        return " ".join([self.command, *self.args])


def whole_server(name: str) -> str:
    return f"{name}{SEPARATOR}{WHOLE_SERVER}"


def known_tool_names() -> list[str]:
    """Every MCP tool name a conversation may choose: each tool, and each whole server."""
    tools = list(McpTool.objects.values_list("exposed_name", flat=True))
    return tools + [whole_server(name) for name in McpServer.objects.values_list("name", flat=True)]


def whole_servers() -> list[str]:
    """Every enabled server as `<server>__*`: all its tools, those it adds later too."""
    servers = McpServer.objects.filter(enabled=True).values_list("name", flat=True)
    return [whole_server(name) for name in servers]


class McpToolQuerySet(models.QuerySet["McpTool"]):
    def chosen(self, names: Collection[str]) -> McpToolQuerySet:
        """The offered tools among a conversation's choices (each by name, or its whole
        server): listed by an enabled server the last time it was asked, and callable without
        the MCP tasks API."""
        wanted = [name for name in names if SEPARATOR in name]
        whole = [name.rsplit(SEPARATOR, 1)[0] for name in wanted if name.endswith(WHOLE_SERVER)]
        return (
            self.filter(available=True, server__enabled=True)
            .exclude(task_support=TASK_ONLY)
            .filter(models.Q(exposed_name__in=wanted) | models.Q(server__name__in=whole))
            .select_related("server")
            .order_by("exposed_name")
        )

    def definitions(self, names: Collection[str]) -> list[ToolDefinition]:
        """What a run would offer of these choices, as the servers last listed their tools."""
        return [row.definition() for row in self.chosen(names)]


class McpTool(models.Model):
    """A tool a server lists, as offered to the model under `exposed_name`."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=200, help_text="As the server names it.")
    exposed_name = models.CharField(
        max_length=64, unique=True, help_text="As the model sees it: <server>__<tool>."
    )
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict)
    annotations = models.JSONField(null=True, blank=True)
    task_support = models.CharField(
        max_length=20,
        blank=True,
        help_text="As the server lists it: forbidden, optional or required (runs only as an MCP "
        "task, so it is not offered).",
    )
    available = models.BooleanField(
        default=True, help_text="Listed by the server the last time it was asked."
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects = McpToolQuerySet.as_manager()

    class Meta:
        ordering = ["server", "name"]
        verbose_name = "MCP tool"
        constraints = [
            models.UniqueConstraint(fields=["server", "name"], name="unique_mcp_tool_name")
        ]

    def __str__(self) -> str:
        return self.exposed_name

    @property
    def repeatable(self) -> bool:
        """Safe to run again when a call's outcome is unknown, as the server annotates it:
        read-only, or idempotent (`readOnlyHint`, `idempotentHint`)."""
        hints = self.annotations or {}
        return any(hints.get(key) is True for key in ("read_only_hint", "idempotent_hint"))

    @property
    def read_only(self) -> bool:
        """The server says the tool only reads (`readOnlyHint`): it runs without asking."""
        return (self.annotations or {}).get("read_only_hint") is True

    def definition(self) -> ToolDefinition:
        """As offered to the model."""
        return ToolDefinition(
            name=self.exposed_name,
            description=self.description or f"{self.name} (MCP server {self.server.name})",
            parameters=self.input_schema or {"type": "object"},
        )
