"""MCP servers, configured by staff, and the tools they list (cached here, refreshed on demand
and when a server says its list changed)."""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models

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
    available = models.BooleanField(
        default=True, help_text="Listed by the server the last time it was asked."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["server", "name"]
        verbose_name = "MCP tool"
        constraints = [
            models.UniqueConstraint(fields=["server", "name"], name="unique_mcp_tool_name")
        ]

    def __str__(self) -> str:
        return self.exposed_name
