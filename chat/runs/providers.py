"""Which endpoint and model a conversation uses: a profile's, else the environment's, else the
scripted model. Every caller asks here (runs, the page's model label, the admin, the inspector).
Also which environment variables may hold a key, and which key goes where: the one rule the
profile form, the admin, the settings page and the commands share.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

from django.conf import settings
from django.db.models import Case, CharField, F, Value, When
from django.db.models.expressions import Combinable
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, NullIf

from chat.agent.clients import ChatClient, OpenAICompatibleChatClient
from chat.agent.messages import Attachment, EmptyContent
from chat.agent.scripted import SCRIPTED_LABEL, SCRIPTED_MODEL, ScriptedChatClient
from chat.agent.wire import WireFormat
from chat.models import Conversation, McpServer, ProviderProfile

from .exceptions import RunRefused

ENVIRONMENT_KEY = "OPENAI_API_KEY"
KEY_PREFIX = "AGENTLAB_KEY_"
MCP_KEY_PREFIX = "AGENTLAB_MCP_KEY_"
# Never a provider's key nor an MCP secret, whatever the allow-lists say: the server's own
# secrets (and the allow-lists themselves, which carry the prefixes).
SERVER_SECRETS = frozenset(
    {
        "SECRET_KEY",
        "DATABASE_URL",
        "REDIS_URL",
        "AGENTLAB_TEST_POSTGRES",
        "AGENTLAB_TEST_REDIS",
        "AGENTLAB_KEY_VARIABLES",
        "AGENTLAB_MCP_KEY_VARIABLES",
    }
)
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


class KeyStatus(StrEnum):
    """What pages may say about a key variable. Of one that is not allowed, only that."""

    NONE = "none"
    NOT_ALLOWED = "not allowed"
    SET = "set"
    UNSET = "unset"


def _name_problem(name: str, example: str, where: str) -> str | None:
    """Why `name` cannot be named as a secret's variable at all, else None."""
    if not ENV_NAME.match(name):
        return (
            "Enter the name of an environment variable (capital letters, digits and "
            f"underscores, not starting with a digit), e.g. {example} — not the key itself."
        )
    if name in SERVER_SECRETS:
        return f"{name} is one of the server's own secrets: it is never sent to {where}."
    return None


def is_provider_key(name: str) -> bool:
    """Whether `name` is on the provider keys' allow-list (it may hold a provider's key)."""
    return (
        name == ENVIRONMENT_KEY
        or name.startswith(KEY_PREFIX)
        or name in settings.AGENTLAB_KEY_VARIABLES
    )


def key_variable_problem(name: str) -> str | None:
    """Why a profile cannot name `name` as its key variable ("" means: no key), else None.

    Allowed: OPENAI_API_KEY, any AGENTLAB_KEY_* name, and the names the operator lists in
    AGENTLAB_KEY_VARIABLES; never one of SERVER_SECRETS. A staff user who may edit profiles
    could otherwise send any variable of the server's environment to a URL of their choosing.
    """
    if not name:
        return None
    if problem := _name_problem(name, "MISTRAL_API_KEY", "a provider"):
        return problem
    if is_provider_key(name):
        return None
    return (
        f"{name} is not an allowed key variable: name {ENVIRONMENT_KEY}, a variable starting "
        f"with {KEY_PREFIX}, or one the server lists in AGENTLAB_KEY_VARIABLES."
    )


def mcp_variable_problem(name: str) -> str | None:
    """Why an MCP server's header or environment cannot name `name` as its value's variable.

    MCP secrets have their own allow-list: any AGENTLAB_MCP_KEY_* name and the names the
    operator lists in AGENTLAB_MCP_KEY_VARIABLES; never one of SERVER_SECRETS. A provider's key
    is refused unless listed there on purpose: whoever may add an MCP server chooses its URL,
    and the header would carry the key to that host.
    """
    if not name:
        return "no variable named."
    if problem := _name_problem(name, "AGENTLAB_MCP_KEY_DOCS", "an MCP server"):
        return problem
    if name.startswith(MCP_KEY_PREFIX) or name in settings.AGENTLAB_MCP_KEY_VARIABLES:
        return None
    if is_provider_key(name):
        return (
            f"{name} holds a provider's key: it is never sent to an MCP server unless the "
            "server lists it in AGENTLAB_MCP_KEY_VARIABLES."
        )
    return (
        f"{name} is not an allowed MCP variable: name a variable starting with "
        f"{MCP_KEY_PREFIX}, or one the server lists in AGENTLAB_MCP_KEY_VARIABLES."
    )


def _value(name: str) -> str | None:
    if name == ENVIRONMENT_KEY:
        return settings.OPENAI_API_KEY or None
    return os.environ.get(name) or None


def read_key(name: str) -> str | None:
    """The key held by an allowed variable; None when it is unset, or not allowed."""
    if not name or key_variable_problem(name):
        return None
    return _value(name)


def read_mcp_variable(name: str) -> str | None:
    """The secret an MCP-allowed variable holds; None when it is unset, or not allowed."""
    if mcp_variable_problem(name):
        return None
    return _value(name)


def key_status(name: str, *, mcp: bool = False) -> KeyStatus:
    """What the admin, the settings page and the commands say about a key variable (of a
    provider, or of an MCP server with `mcp`): whether an allowed one is set here, never
    whether one that is not allowed exists."""
    if not name:
        return KeyStatus.NONE
    problem, read = (
        (mcp_variable_problem, read_mcp_variable) if mcp else (key_variable_problem, read_key)
    )
    if problem(name):
        return KeyStatus.NOT_ALLOWED
    return KeyStatus.SET if read(name) else KeyStatus.UNSET


def _same_url(one: str, other: str) -> bool:
    return one.strip().rstrip("/") == other.strip().rstrip("/")


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

    @property
    def takes_images(self) -> bool | None:
        """Whether the model takes images, as its profile's probe found (None: not known). A
        model other than the profile's is not known."""
        if self.profile is None or self.model != self.profile.model:
            return None
        return self.profile.accepts_images

    def api_key(self) -> str | None:
        """The key from the variable this endpoint names; RunRefused when that variable is not
        allowed (a profile saved before the rule, or written straight into the database)."""
        if self.key_variable and key_variable_problem(self.key_variable):
            # The variable is not named: a key typed where its name belongs would show.
            name = self.profile.name if self.profile is not None else self.base_url
            raise RunRefused(
                f"The provider profile {name!r} names a key variable the server does not "
                "allow, so nothing was sent. An administrator can fix the profile."
            )
        return read_key(self.key_variable)


def endpoint(
    profile: ProviderProfile | None = None, *, model: str | None = None, base_url: str | None = None
) -> Endpoint:
    """The endpoint of a profile, else of the environment, else the scripted model.

    `model` (a conversation's own setting) wins over the endpoint's; `base_url` (a terminal
    override) replaces the profile with the environment's settings at that URL, but
    OPENAI_API_KEY goes only to OPENAI_BASE_URL: another URL gets no key.
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
    key = ENVIRONMENT_KEY if _same_url(url, settings.OPENAI_BASE_URL) else ""
    return Endpoint(url, model or settings.AGENTLAB_MODEL, key, wire)


async def profile_for_run(conversation: Conversation, user: Any) -> ProviderProfile | None:
    """The conversation's profile for a run `user` starts; RunRefused when they may not use
    it (it was chosen while they could, or by someone else)."""
    if conversation.profile_id is None:
        return None
    profile = await ProviderProfile.objects.filter(pk=conversation.profile_id).afirst()
    if profile is None or await profile.ausable_by(user):
        return profile
    raise RunRefused(
        f"You may not use the provider {profile.name!r}: choose another one in Agent settings."
    )


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
    """The secret values this process could send (the environment's and the profiles' keys,
    the MCP servers' headers and environment), to redact."""
    names = ProviderProfile.objects.exclude(api_key_env="").values_list("api_key_env", flat=True)
    keys = {read_key(name) for name in {ENVIRONMENT_KEY, *names}}
    for headers, env in McpServer.objects.values_list("headers", "env"):
        for variable in [*(headers or {}).values(), *(env or {}).values()]:
            keys.add(read_mcp_variable(str(variable)))
    return [key for key in keys if key]


def check_images(target: Endpoint, attachments: Sequence[Attachment]) -> None:
    """RunRefused when the message sends images to a model known to take none."""
    images = [a.name for a in attachments if a.kind == "image"]
    if images and target.takes_images is False:
        raise RunRefused(images_refused(target.label, images))


def images_refused(model: str, names: Sequence[str]) -> str:
    """The line for images sent to a model that takes none (the composer shows it too)."""
    shown = ", ".join(names[:3]) + (" …" if len(names) > 3 else "")
    return (
        f"The model {model} takes no images (check_provider found so): remove {shown} or "
        "choose another model in Agent settings."
    )
