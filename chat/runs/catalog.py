"""The models an endpoint offers (its `GET /models`), for the model picker: cached per endpoint,
asked for with the key the endpoint's runs would send, and only to that endpoint's base URL."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.core.cache import cache

from chat.agent.clients import OpenAICompatibleChatClient
from chat.agent.errors import ChatClientError
from chat.agent.http import clip
from chat.agent.scripted import SCRIPTED_MODEL

from .exceptions import RunRefused
from .providers import Endpoint

CACHE_SECONDS = 600
CONNECT_SECONDS = 5.0
READ_SECONDS = 10.0


@dataclass(frozen=True)
class ModelList:
    """What the picker shows: the models, or why there are none (free text still works)."""

    models: tuple[str, ...] = ()
    error: str = ""
    cached: bool = False
    scripted: bool = False


def cache_key(target: Endpoint) -> str:
    """Per base URL and key variable (never the key itself): two profiles on one URL with
    different keys may be offered different models."""
    name = f"{target.base_url.strip().rstrip('/')}\n{target.key_variable}"
    return "agentlab:models:" + hashlib.sha256(name.encode()).hexdigest()


async def list_models(target: Endpoint, *, refresh: bool = False) -> ModelList:
    """The endpoint's models, from the cache unless `refresh`; a failure is not cached.

    The key is the one `target.api_key()` gives runs: the endpoint's own variable, sent only to
    the endpoint's own base URL.
    """
    if target.scripted:
        return ModelList((SCRIPTED_MODEL,), scripted=True)
    key = cache_key(target)
    if not refresh:
        hit = await cache.aget(key)
        if isinstance(hit, list):
            return ModelList(tuple(hit), cached=True)
    try:
        api_key = target.api_key()
    except RunRefused as exc:
        return ModelList(error=str(exc))
    client = OpenAICompatibleChatClient(
        base_url=target.base_url,
        api_key=api_key,
        model=target.model,
        connect_timeout=CONNECT_SECONDS,
        read_timeout=READ_SECONDS,
        max_retries=0,
    )
    try:
        async with client:
            models = sorted(set(await client.list_models()))
    except ChatClientError as exc:
        return ModelList(error=f"The models could not be listed ({clip(str(exc), 160)}).")
    await cache.aset(key, models, CACHE_SECONDS)
    return ModelList(tuple(models))
