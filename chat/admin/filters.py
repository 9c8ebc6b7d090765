"""List filters: by purpose, by model, by run status, by approval, by provider profile, by
agent."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest

from chat.forms import DEFAULT_PROVIDER_LABEL
from chat.models import (
    Agent,
    Approval,
    Conversation,
    ProviderProfile,
    Purpose,
    Run,
    RunStatus,
    ToolCall,
)
from chat.models.agents import BUILT_IN_NAME
from chat.runs.providers import model_expression


class PurposeFilter(admin.SimpleListFilter):
    """Chats unless asked otherwise: an evaluation leaves a replay per attempt, which would
    bury the conversations people had; its results lead to them. The parameter is the one the
    field's own filter used, so links made for it still work."""

    title = "purpose"
    parameter_name = "purpose__exact"
    ALL = "all"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(self.ALL, "All"), *Purpose.choices]

    def value(self) -> str:
        return super().value() or Purpose.CHAT

    def choices(self, changelist: ChangeList) -> Iterator[Any]:
        choices = super().choices(changelist)
        next(choices)  # Django's "All" means no parameter, which here means chats
        for choice in choices:
            if choice["selected"] and self.value() == Purpose.CHAT:
                # The default's link is the bare list, as "clear all filters" leads to.
                choice["query_string"] = changelist.get_query_string(remove=[self.parameter_name])
            yield choice

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value == self.ALL else queryset.filter(purpose=value)


class ModelFilter(admin.SimpleListFilter):
    title = "model"
    parameter_name = "model"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = (
            Conversation.objects.annotate(model_name=model_expression())
            .exclude(model_name="")
            .order_by("model_name")
            .values_list("model_name", flat=True)
            .distinct()
        )
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(model_name=self.value()) if self.value() else queryset


class RunStatusFilter(admin.SimpleListFilter):
    title = "run status"
    parameter_name = "run_status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> Sequence[tuple[str, str]]:
        return RunStatus.choices

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if not self.value():
            return queryset
        runs = Run.objects.filter(conversation=OuterRef("pk"), status=self.value())
        return queryset.filter(Exists(runs))


class ApprovalFilter(admin.SimpleListFilter):
    """Runs that asked a person about a call: any, or by the decision one of its calls got."""

    title = "approval"
    parameter_name = "approval"
    ASKED = "asked"

    def lookups(self, request: HttpRequest, model_admin: Any) -> Sequence[tuple[str, str]]:
        return [(self.ASKED, "Asked for approval"), *Approval.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        calls = ToolCall.objects.filter(run=OuterRef("pk"))
        if value == self.ASKED:
            calls = calls.filter(asked_at__isnull=False)
        elif value in Approval.values:
            calls = calls.filter(approval=value)
        else:
            return queryset.none()
        return queryset.filter(Exists(calls))


class ProviderFilter(admin.SimpleListFilter):
    """Which provider profile a conversation uses; "default" is the environment's endpoint."""

    title = "provider"
    parameter_name = "provider"
    DEFAULT = "default"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        profiles = ProviderProfile.objects.order_by("name").values_list("pk", "name")
        return [(self.DEFAULT, DEFAULT_PROVIDER_LABEL), *((str(pk), name) for pk, name in profiles)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        if value == self.DEFAULT:
            return queryset.filter(profile__isnull=True)
        return queryset.filter(profile_id=value) if value.isdigit() else queryset.none()


class AgentFilter(admin.SimpleListFilter):
    """Which agent a conversation started from (any of its versions); "default" is the built-in
    Default (no version)."""

    title = "agent"
    parameter_name = "agent"
    DEFAULT = "default"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        found = Agent.objects.order_by("name").values_list("pk", "name")
        return [(self.DEFAULT, BUILT_IN_NAME), *((str(pk), name) for pk, name in found)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        if value == self.DEFAULT:
            return queryset.filter(agent_version__isnull=True)
        return (
            queryset.filter(agent_version__agent_id=value) if value.isdigit() else queryset.none()
        )
