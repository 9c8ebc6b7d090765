"""Provider profiles: an OpenAI-compatible endpoint and its quirks."""

from __future__ import annotations

from typing import Any

from django.core.validators import URLValidator
from django.db import models

# Hosts without a dot too (docker-compose service names such as http://vllm:8000/v1).
_ANY_HOST_URL = r"^https?://[^\s/:@]+(:\d+)?(/\S*)?$"

NAME_CHARS = 100
USE_EVERY_PROFILE = "chat.use_providerprofile"


class ProviderProfileQuerySet(models.QuerySet["ProviderProfile"]):
    def usable_by(self, user: Any) -> ProviderProfileQuerySet:
        """The profiles `user` may choose for a conversation (`ProviderProfile.ausable_by`)."""
        if user.has_perm(USE_EVERY_PROFILE):
            return self.all()
        return self.filter(available_to_everyone=True)


class ProviderProfile(models.Model):
    """An OpenAI-compatible endpoint and its quirks. Keys stay in the environment, never here."""

    class ToolCallContent(models.TextChoices):
        EMPTY = "empty", 'Empty string ""'
        NULL = "null", "null"
        OMIT = "omit", "Omitted"

    class ToolCallIds(models.TextChoices):
        ANY = "any", "Any string"
        ALNUM9 = "alnum9", "9 letters or digits (Mistral)"

    class ReasoningField(models.TextChoices):
        DROP = "", "Not sent back"
        REASONING_CONTENT = "reasoning_content", "reasoning_content (DeepSeek)"
        REASONING = "reasoning", "reasoning"

    name = models.CharField(max_length=NAME_CHARS, unique=True)
    base_url = models.CharField(
        max_length=500,
        validators=[URLValidator(schemes=["http", "https"], regex=_ANY_HOST_URL)],
        help_text="e.g. https://api.openai.com/v1 or http://vllm:8000/v1",
    )
    api_key_env = models.CharField(
        max_length=100,
        blank=True,
        default="OPENAI_API_KEY",
        help_text="Name of the environment variable that holds the key (empty: no key).",
    )
    model = models.CharField(max_length=200)
    tool_call_content = models.CharField(
        max_length=10, choices=ToolCallContent.choices, default=ToolCallContent.EMPTY
    )
    tool_call_ids = models.CharField(
        max_length=10, choices=ToolCallIds.choices, default=ToolCallIds.ANY
    )
    reasoning_field = models.CharField(
        max_length=20, choices=ReasoningField.choices, default=ReasoningField.DROP, blank=True
    )
    parallel_tool_calls = models.BooleanField(
        default=True, help_text="Send parallel_tool_calls with the tools."
    )
    accepts_images = models.BooleanField(
        null=True,
        blank=True,
        verbose_name="takes images",
        help_text="Whether the model takes images (image_url parts); check_provider probes it. "
        "Unknown: images are sent and the provider decides.",
    )
    available_to_everyone = models.BooleanField(
        default=False,
        help_text='Every user may choose it; otherwise only users with the permission "Can use '
        'every provider profile" (and superusers).',
    )
    notes = models.TextField(blank=True, help_text="What check_provider found, for example.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProviderProfileQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        permissions = [("use_providerprofile", "Can use every provider profile")]

    def __str__(self) -> str:
        return self.name

    async def ausable_by(self, user: Any) -> bool:
        """Whether `user` may run a conversation on this profile (`usable_by` for one row)."""
        return self.available_to_everyone or await user.ahas_perm(USE_EVERY_PROFILE)
