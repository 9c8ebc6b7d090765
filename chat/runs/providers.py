"""Which endpoint and model a conversation uses: a profile's, else the environment's, else the
scripted model. Every caller asks here (runs, the page's model label, the admin, the inspector).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import cast

from django.conf import settings
from django.db.models import Case, CharField, F, Value, When
from django.db.models.expressions import Combinable
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, NullIf

from chat.agent.clients import ChatClient, OpenAICompatibleChatClient
from chat.agent.messages import EmptyContent
from chat.agent.scripted import SCRIPTED_LABEL, SCRIPTED_MODEL, ScriptedChatClient
from chat.agent.wire import WireFormat
from chat.models import Conversation, ProviderProfile

from .exceptions import RunRefused

ENVIRONMENT_KEY = "OPENAI_API_KEY"


@dataclass(frozen=True)
class Endpoint:
    """Where requests go. `base_url` is empty for the built-in scripted model."""

    base_url: str
    model: str
    key_variable: str
    wire: WireFormat
    profile: ProviderProfile | None = None

    @property
    def scripted(self) -> bool:
        return not self.base_url

    @property
    def label(self) -> str:
        """What the page says answers: the model, or the scripted model."""
        if self.scripted:
            return SCRIPTED_LABEL
        return self.model or "model not set"

    def api_key(self) -> str | None:
        """The key from the variable this endpoint names (the environment's through settings)."""
        if self.profile is None:
            return settings.OPENAI_API_KEY or None
        return os.environ.get(self.key_variable) or None if self.key_variable else None


def endpoint(
    profile: ProviderProfile | None = None, *, model: str | None = None, base_url: str | None = None
) -> Endpoint:
    """The endpoint of a profile, else of the environment, else the scripted model.

    `model` (a conversation's own setting) wins over the endpoint's; `base_url` (a terminal
    override) replaces the profile with the environment's settings at that URL.
    """
    if profile is not None and not base_url:
        return Endpoint(
            profile.base_url,
            model or profile.model,
            profile.api_key_env,
            wire_format(profile),
            profile,
        )
    url = base_url or settings.OPENAI_BASE_URL
    if not url:
        return Endpoint("", model or SCRIPTED_MODEL, "", WireFormat())
    wire = WireFormat(empty_content=cast(EmptyContent, settings.AGENTLAB_TOOL_CALL_CONTENT))
    return Endpoint(url, model or settings.AGENTLAB_MODEL, ENVIRONMENT_KEY, wire)


def conversation_endpoint(conversation: Conversation) -> Endpoint:
    """The endpoint a conversation's next run talks to (its profile is fetched if not cached)."""
    return endpoint(conversation.profile, model=conversation.agent_parameters().model)


def model_expression() -> Combinable:
    """`conversation_endpoint(c).model` in SQL, for the admin's list column and filter."""
    own = NullIf(KT("parameters__model"), Value(""))
    fallback = settings.AGENTLAB_MODEL if settings.OPENAI_BASE_URL else SCRIPTED_MODEL
    return Case(
        When(profile__isnull=False, then=Coalesce(own, F("profile__model"))),
        default=Coalesce(own, Value(fallback)),
        output_field=CharField(),
    )


def build_client(target: Endpoint, *, api_key: str | None = None) -> ChatClient:
    """A client for the endpoint; RunRefused when an HTTP endpoint has no model to ask for."""
    if target.scripted:
        return ScriptedChatClient(delay=settings.AGENTLAB_SCRIPTED_DELAY)
    if not target.model:
        raise RunRefused("Set AGENTLAB_MODEL (or pass a model) to use an OpenAI-compatible server.")
    return OpenAICompatibleChatClient(
        base_url=target.base_url,
        api_key=api_key or target.api_key(),
        model=target.model,
        wire=target.wire,
    )


def wire_format(profile: ProviderProfile) -> WireFormat:
    return WireFormat(
        empty_content=profile.tool_call_content,  # type: ignore[arg-type]
        tool_call_ids=profile.tool_call_ids,  # type: ignore[arg-type]
        reasoning_field=profile.reasoning_field,  # type: ignore[arg-type]
        parallel_tool_calls=profile.parallel_tool_calls,
    )


def known_keys() -> list[str]:
    """The key values this process could send (the environment's and the profiles'), to redact."""
    names = ProviderProfile.objects.exclude(api_key_env="").values_list("api_key_env", flat=True)
    keys = [os.environ[name] for name in set(names) if os.environ.get(name)]
    return [settings.OPENAI_API_KEY, *keys] if settings.OPENAI_API_KEY else keys
