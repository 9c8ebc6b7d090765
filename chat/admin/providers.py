"""Provider profiles: the one editable admin (keys stay in the environment)."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from chat.forms import ProviderProfileForm
from chat.models import ProviderProfile
from chat.runs.providers import KeyStatus, key_variable_problem
from chat.runs.providers import key_status as variable_status

from .base import LabAdmin
from .filters import ProviderFilter, PurposeFilter


@admin.register(ProviderProfile)
class ProviderProfileAdmin(LabAdmin):
    """Editable: an endpoint and its quirks. The key stays in the environment variable it names;
    the admin shows whether that variable is set in this process, never its value, and of a
    variable the server does not allow as a key, not even whether it exists."""

    form = ProviderProfileForm
    list_display = (
        "name",
        "base_url",
        "model",
        "tool_call_content",
        "tool_call_ids",
        "reasoning_field_display",
        "parallel_tool_calls",
        "accepts_images",
        "api_key_env_display",
        "key_set",
        "available_to_everyone",
        "conversation_count",
    )
    list_filter = (
        "tool_call_content",
        "tool_call_ids",
        "reasoning_field",
        "parallel_tool_calls",
        "available_to_everyone",
    )
    search_fields = ("name", "base_url", "model", "notes")
    fieldsets = (
        (None, {"fields": ("name", "base_url", "model", "api_key_env", "key_status")}),
        (
            "Who may use it",
            {
                "fields": ("available_to_everyone",),
                "description": 'Users with the permission "Can use every provider profile" '
                "(directly or through a group) and superusers may use every profile.",
            },
        ),
        (
            "Quirks",
            {
                "fields": (
                    "tool_call_content",
                    "tool_call_ids",
                    "reasoning_field",
                    "parallel_tool_calls",
                    "accepts_images",
                ),
                "description": "What differs between providers; check_provider --save-profile "
                "NAME detects them.",
            },
        ),
        (None, {"fields": ("notes", "conversation_count", "created_at", "updated_at")}),
    )
    readonly_fields = ("key_status", "conversation_count", "created_at", "updated_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[ProviderProfile]:
        queryset: QuerySet[ProviderProfile] = super().get_queryset(request)
        return queryset.annotate(n_conversations=Count("conversations"))

    @admin.display(description="reasoning sent back as", ordering="reasoning_field")
    def reasoning_field_display(self, obj: ProviderProfile) -> str:
        return obj.reasoning_field or "—"

    @admin.display(description="key variable", ordering="api_key_env")
    def api_key_env_display(self, obj: ProviderProfile) -> str:
        if variable_status(obj.api_key_env) is KeyStatus.NOT_ALLOWED:
            return f"{obj.api_key_env} (not allowed)"
        return obj.api_key_env or "— (no key)"

    @admin.display(description="key set here", boolean=True)
    def key_set(self, obj: ProviderProfile) -> bool | None:
        """Whether the named variable is set in this process: yes/no, never the value; for no
        variable, or one that is not allowed, neither."""
        return {KeyStatus.SET: True, KeyStatus.UNSET: False}.get(variable_status(obj.api_key_env))

    @admin.display(description="key")
    def key_status(self, obj: ProviderProfile | None) -> str:
        if obj is None or obj.pk is None:
            return "—"
        match variable_status(obj.api_key_env):
            case KeyStatus.NONE:
                return "No variable named: requests are sent without a key."
            case KeyStatus.NOT_ALLOWED:
                problem = key_variable_problem(obj.api_key_env)
                return f"Runs with this profile are refused. {problem}"
            case KeyStatus.SET:
                return f"{obj.api_key_env} is set in this server process."
        return (
            f"{obj.api_key_env} is NOT set in this server process: requests will be sent "
            "without a key."
        )

    @admin.display(description="conversations", ordering="n_conversations")
    def conversation_count(self, obj: ProviderProfile) -> SafeString | int:
        """Every conversation on the profile, evaluations' replays too (they use it as much),
        linked to the list of them all: that list alone shows only chats."""
        count = getattr(obj, "n_conversations", None)
        if count is None:
            count = obj.conversations.count()
        if not count:
            return 0
        url = reverse("admin:chat_conversation_changelist")
        query = urlencode(
            {
                ProviderFilter.parameter_name: str(obj.pk),
                PurposeFilter.parameter_name: PurposeFilter.ALL,
            }
        )
        return format_html('<a href="{}?{}">{}</a>', url, query, count)
