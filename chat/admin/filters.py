"""List filters: by model, by run status, by provider profile."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest

from chat.forms import DEFAULT_PROVIDER_LABEL
from chat.models import Conversation, ProviderProfile, Run, RunStatus
from chat.runs.providers import model_expression


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
