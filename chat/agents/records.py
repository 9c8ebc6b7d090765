"""Agents as JSON files: `agents export` writes an agent with every version, `agents import`
reads one back, all or nothing, through the bounded gate.

A file names what it does not carry: an endpoint is a provider profile's name, an MCP tool
names its server. A profile missing here refuses the import (the version would talk to another
endpoint); a missing MCP server is said in one line and its tools stay chosen, not offered, as
a conversation keeps a tool that is unavailable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from chat.agent.mcp import SEPARATOR
from chat.agent.tools import default_registry
from chat.models import Agent, AgentVersion, McpServer, ProviderProfile, Visibility
from chat.models.agents import stored_parameters
from chat.models.mcp import known_tool_names
from chat.transcripts.limits import (
    NOTE_CHARS,
    ROWS,
    Count,
    JsonRefused,
    Name,
    at_most,
    import_context,
    load_json,
    refusal_text,
)

from .exceptions import AgentRefused
from .publishing import mark_published

# The rules a new agent and version follow wherever they are made (a free slug; the models'
# own validators as one line), so an imported agent is made as `create_agent` makes one.
from .versions import check, free_slug

FORMAT: Final = "agentlab.agent"
FORMAT_VERSION: Final = 1
MAX_FILE_CHARS: Final = 20_000_000
"""An agent file: many versions of long prompts, far below what a process cannot hold."""


class VersionRecord(BaseModel):
    """One version as the file holds it. `author` and `created_at` say who made it and when
    where it was exported; an imported version is its importer's, made when imported."""

    model_config = ConfigDict(extra="forbid")

    number: Annotated[Count, Field(ge=1)]
    note: Annotated[str, at_most(NOTE_CHARS)] = ""
    endpoint: Name | None = None
    """A provider profile's name; None: the server's own endpoint."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    author: Name | None = None
    created_at: Name | None = None

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        """AgentParameters, as a version stores them (a tool missing here stays chosen)."""
        try:
            return stored_parameters(value)
        except DjangoValidationError as exc:
            raise ValueError(" ".join(exc.messages)) from None


class AgentRecord(BaseModel):
    """An agent as `agents export` writes it: its name, what it does, who may use it, its
    versions and which one is published."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["agentlab.agent"]
    version: Literal[1]
    name: Name
    description: Annotated[str, at_most(NOTE_CHARS)] = ""
    visibility: Visibility = Visibility.PRIVATE
    published: int
    versions: Annotated[list[VersionRecord], ROWS, Field(min_length=1)]

    @model_validator(mode="after")
    def _numbers(self) -> AgentRecord:
        numbers = [version.number for version in self.versions]
        if len(set(numbers)) != len(numbers):
            raise ValueError("two versions have the same number")
        if self.published not in numbers:
            raise ValueError(f"published: there is no version {self.published}")
        return self


def record(agent: Agent) -> dict[str, Any]:
    """The agent with every version, oldest first, as its file holds it."""
    rows = agent.versions.select_related("profile", "author").order_by("number")
    published = agent.published.number if agent.published is not None else None
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "name": agent.name,
        "description": agent.description,
        "visibility": agent.visibility,
        "published": published,
        "versions": [
            {
                "number": row.number,
                "note": row.note,
                "endpoint": row.profile.name if row.profile is not None else None,
                "parameters": row.parameters,
                "author": row.author.get_username() if row.author is not None else None,
                "created_at": row.created_at.isoformat(),
            }
            for row in rows
        ],
    }


def export_text(agent: Agent) -> str:
    return json.dumps(record(agent), ensure_ascii=False, indent=2)


def read(text: str) -> AgentRecord:
    """A file's text as an agent record, through the bounded gate; AgentRefused saying why
    not, in one line."""
    try:
        data = load_json(text, max_chars=MAX_FILE_CHARS)
    except JsonRefused as exc:
        raise AgentRefused(f"Not an agent file: {exc}.") from None
    if not isinstance(data, dict):
        raise AgentRefused("Not an agent file: it holds no JSON object.")
    if data.get("format") != FORMAT:
        raise AgentRefused(f"Not an agent file: its format is not {FORMAT!r}.")
    try:
        return AgentRecord.model_validate(data, context=import_context())
    except ValidationError as exc:
        raise AgentRefused(f"Not imported: {refusal_text(exc)}.") from None


@dataclass
class Imported:
    """The agent an import made, and a line for each MCP server or tool missing here."""

    agent: Agent
    notes: list[str] = field(default_factory=list)


def store(agent_record: AgentRecord, *, user: Any, name: str | None = None) -> Imported:
    """The record as a new agent of `user`'s (under `name`, when given), its versions numbered
    as in the file, the file's published one published; nothing stored when any part is
    refused (AgentRefused, one line)."""
    chosen = (name if name is not None else agent_record.name).strip()
    if not chosen:
        raise AgentRefused("An agent needs a name.")
    profiles = _profiles(agent_record.versions, user)
    agent = Agent(
        name=chosen,
        slug=free_slug(chosen),
        description=agent_record.description.strip(),
        owner=user,
        visibility=agent_record.visibility,
    )
    check(agent, exclude=["published", "suite"])
    try:
        with transaction.atomic():
            agent.save()
            made = {}
            for version in sorted(agent_record.versions, key=lambda row: row.number):
                row = AgentVersion(
                    agent=agent,
                    number=version.number,
                    profile=profiles.get(version.endpoint or ""),
                    parameters=version.parameters,
                    note=version.note.strip(),
                    author=user,
                )
                check(row, exclude=["agent", "profile", "author"])
                row.save()
                made[version.number] = row
            mark_published(agent, made[agent_record.published], user)
    except IntegrityError:
        raise AgentRefused(
            f"Another agent was made with the name {chosen!r} at the same moment: try again, or "
            "import it under another name."
        ) from None
    return Imported(agent, missing(agent_record.versions))


def _profiles(versions: Iterable[VersionRecord], user: Any) -> dict[str, ProviderProfile]:
    """The provider profiles the versions name, each one `user` may use; AgentRefused naming
    the first that is missing (a version would talk to another endpoint)."""
    names = {version.endpoint for version in versions if version.endpoint}
    usable = ProviderProfile.objects.usable_by(user).filter(name__in=names)
    found = {profile.name: profile for profile in usable}
    for version in versions:
        if version.endpoint and version.endpoint not in found:
            raise AgentRefused(
                f"Version {version.number} talks to the provider {version.endpoint!r}, which is "
                "not here or which you may not use: add it (the admin's Provider profiles) or "
                "ask an administrator, then import again. Nothing was imported."
            )
    return found


def unavailable(names: Iterable[str]) -> list[str]:
    """Of these chosen tools, those this installation does not know: a built-in tool this
    process lacks, an MCP tool of a server not configured here or that lists no such tool."""
    known = {*default_registry.names(), *known_tool_names()}
    return [name for name in names if name not in known and default_registry.withheld(name) is None]


def missing(versions: Iterable[VersionRecord]) -> list[str]:
    """One line per MCP server the versions name that is not configured here, and per other
    tool unknown here: each stays chosen in its versions, not offered until it is."""
    servers = list(McpServer.objects.values_list("name", flat=True))
    by_server: dict[str, dict[str, list[int]]] = {}
    others: dict[str, list[int]] = {}
    for version in sorted(versions, key=lambda row: row.number):
        for name in unavailable(version.parameters.get("enabled_tools", ())):
            server = _missing_server(name, servers)
            if server is None:
                others.setdefault(name, []).append(version.number)
            else:
                by_server.setdefault(server, {}).setdefault(name, []).append(version.number)
    lines = [
        f"MCP server {server!r} is not configured here: {_uses(tools)} kept, unavailable "
        "until it is added."
        for server, tools in by_server.items()
    ]
    lines += [
        f"Tool {name!r} is not available here ({_numbers(numbers)}): kept, not offered."
        for name, numbers in others.items()
    ]
    return lines


def _missing_server(name: str, servers: Iterable[str]) -> str | None:
    """The server an MCP tool's name starts with, when no configured server is it."""
    if SEPARATOR not in name:
        return None
    if any(name.startswith(server + SEPARATOR) for server in servers):
        return None
    return name.split(SEPARATOR, 1)[0]


def _uses(tools: dict[str, list[int]]) -> str:
    return ", ".join(f"{name} ({_numbers(numbers)})" for name, numbers in tools.items())


def _numbers(numbers: list[int]) -> str:
    return ", ".join(f"v{number}" for number in numbers)
