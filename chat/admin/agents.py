"""Agents with their versions and who published which: staff correct an agent's name,
description, visibility and suite where the agents' rule lets them (`chat.access`); versions
and publications are records."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils.safestring import SafeString

from chat import access
from chat.models import Agent, AgentVersion, Publication

from .annotations import excerpt
from .base import LabAdmin, ReadOnlyInline, RecordAdmin, admin_link, json_block

SERVER_ENDPOINT = "— (the server's own)"


class VersionColumns:
    """What a version's rows say, in its agent's inline and in the list of versions."""

    @admin.display(description="version", ordering="number")
    def version_link(self, obj: AgentVersion) -> SafeString | str:
        return admin_link(obj, f"v{obj.number}")

    @admin.display(description="published", boolean=True)
    def published_mark(self, obj: AgentVersion) -> bool:
        return obj.is_published

    @admin.display(description="note")
    def note_excerpt(self, obj: AgentVersion) -> str:
        return excerpt(obj.note) or "—"

    @admin.display(description="endpoint", ordering="profile__name")
    def endpoint(self, obj: AgentVersion) -> SafeString | str:
        return SERVER_ENDPOINT if obj.profile is None else admin_link(obj.profile)


class AgentVersionInline(VersionColumns, ReadOnlyInline):
    """An agent's versions, newest first: who made each, when, why; the published one marked."""

    model = AgentVersion
    fields = ("version_link", "published_mark", "author", "note_excerpt", "endpoint", "created_at")
    readonly_fields = fields
    show_change_link = False  # the version is the link
    verbose_name = "version"

    def get_queryset(self, request: HttpRequest) -> QuerySet[AgentVersion]:
        queryset: QuerySet[AgentVersion] = super().get_queryset(request)
        return queryset.select_related("agent", "author", "profile").order_by("-number")


class PublicationInline(ReadOnlyInline):
    """Who published which version, and when: newest first."""

    model = Publication
    fields = ("published_version", "published_by", "published_at")
    readonly_fields = fields
    show_change_link = False
    verbose_name = "publication"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Publication]:
        queryset: QuerySet[Publication] = super().get_queryset(request)
        return queryset.select_related("version__agent", "published_by")

    @admin.display(description="version")
    def published_version(self, obj: Publication) -> SafeString | str:
        return admin_link(obj.version, f"v{obj.version.number}")


@admin.register(Agent)
class AgentAdmin(LabAdmin):
    list_display = (
        "name",
        "owner",
        "visibility",
        "published_display",
        "version_count",
        "suite",
        "require_suite_pass",
        "updated_at",
    )
    list_filter = ("visibility", "require_suite_pass")
    search_fields = ("name", "slug", "description", "owner__username")
    search_help_text = "Words in the name, the description or the owner's user name."
    list_select_related = ("owner", "published", "suite")
    fields = (
        "name",
        "slug",
        "description",
        "owner",
        "visibility",
        "published_display",
        "suite",
        "require_suite_pass",
        "created_at",
        "updated_at",
    )
    readonly_fields = ("slug", "owner", "published_display", "created_at", "updated_at")
    inlines = (AgentVersionInline, PublicationInline)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Agent]:
        """With `n_versions` as a subquery: a join would multiply rows."""
        queryset: QuerySet[Agent] = super().get_queryset(request)
        versions = (
            AgentVersion.objects.filter(agent=OuterRef("pk"))
            .order_by()
            .values("agent")
            .annotate(n=Count("pk"))
            .values("n")
        )
        return queryset.annotate(n_versions=Coalesce(Subquery(versions), 0))

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Agents are made from a conversation's settings (its version 1)."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Django's permission, and the agents' rule: a private agent stays its owner's."""
        allowed = super().has_change_permission(request, obj)
        if obj is None or not allowed:
            return allowed
        return access.may_agent(request.user, access.AgentAction.CHANGE, obj)

    @admin.display(description="published version", ordering="published__number")
    def published_display(self, obj: Agent) -> SafeString | str:
        if obj.published is None:
            return "—"
        return admin_link(obj.published, f"v{obj.published.number}")

    @admin.display(description="versions", ordering="n_versions")
    def version_count(self, obj: Agent) -> int:
        return getattr(obj, "n_versions", 0)


@admin.register(AgentVersion)
class AgentVersionAdmin(VersionColumns, RecordAdmin):
    """A version never changes: a change is a new version, made from a conversation."""

    list_display = (
        "__str__",
        "agent_link",
        "published_mark",
        "author",
        "note_excerpt",
        "endpoint",
        "created_at",
    )
    list_filter = (("agent", admin.RelatedOnlyFieldListFilter),)
    search_fields = ("agent__name", "note")
    search_help_text = "Words in the agent's name or the note."
    list_select_related = ("agent", "author", "profile")
    fields = (
        "agent_link",
        "number",
        "published_mark",
        "author",
        "created_at",
        "note",
        "endpoint",
        "parameters_display",
        "conversation_count",
    )
    readonly_fields = fields

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Versions go only with their agent (or its owner): whoever may delete agents."""
        return obj is not None and request.user.has_perm("chat.delete_agent")

    @admin.display(description="agent", ordering="agent__name")
    def agent_link(self, obj: AgentVersion) -> SafeString | str:
        return admin_link(obj.agent)

    @admin.display(description="parameters")
    def parameters_display(self, obj: AgentVersion) -> SafeString:
        return json_block(obj.parameters)

    @admin.display(description="conversations started from it")
    def conversation_count(self, obj: AgentVersion) -> int:
        return obj.conversations.count()
