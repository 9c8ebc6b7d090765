"""Tests of chat.picker and chat.runs.catalog: the header's model picker lists the endpoint's
models from a real local server (cached, refreshable), sends a key only to its own endpoint, and
saves provider and model by the settings panel's rules."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from chat.models import Conversation, ProviderProfile
from chat.picker import NOT_USABLE
from chat.testing import factories as make
from chat.testing.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.django_db

MODELS = ["fake-small", "fake-large", "fake-model"]


@pytest.fixture(autouse=True)
def _empty_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(models=MODELS) as server:
        yield server


@pytest.fixture
def owner() -> Any:
    return make.user("ada")


@pytest.fixture
def ada(owner: Any) -> Client:
    client = Client()
    client.force_login(owner)
    return client


def on(owner: Any, base_url: str, *, key: str = "", name: str = "fake") -> Conversation:
    """A conversation of `owner` on a profile everyone may use, at `base_url`."""
    profile = ProviderProfile.objects.create(
        name=name,
        base_url=base_url,
        model="fake-model",
        api_key_env=key,
        available_to_everyone=True,
    )
    made = make.conversation(owner, "Picked", temperature=0.3)
    made.profile = profile
    made.save()
    return made


def panel(client: Client, conversation: Conversation) -> str:
    response = client.get(reverse("chat:conversation_model", args=[conversation.pk]))
    assert response.status_code == 200
    return response.content.decode()


def listed(html: str) -> list[str]:
    return re.findall(r'data-pick-model="([^"]*)"', html)


def model_requests(server: FakeOpenAIServer) -> list[Any]:
    return [r for r in server.requests if r.method == "GET" and r.path.endswith("/models")]


def test_the_header_shows_provider_and_model_and_the_scripted_model_lists_itself(
    ada: Client, owner: Any
) -> None:
    conversation = make.new_conversation(owner)
    page = ada.get(reverse("chat:conversation_detail", args=[conversation.pk])).content.decode()
    assert 'aria-label="Model: Server default · Scripted model (offline)"' in page
    assert '<span class="model-label">Scripted model (offline)</span>' in page

    html = panel(ada, conversation)
    assert listed(html) == ["scripted"]
    assert "The scripted model is the only model here." in html
    assert re.search(r'<label for="id_picker-profile">Provider</label>', html)
    assert re.search(r'<label for="id_picker-model">Model</label>', html)
    assert 'placeholder="scripted"' in html
    assert ">Refresh models</button>" in html and ">Use this model</button>" in html


def test_the_models_come_from_the_endpoint_once_then_from_the_cache(
    ada: Client, owner: Any, fake: FakeOpenAIServer
) -> None:
    conversation = on(owner, fake.base_url)

    html = panel(ada, conversation)
    assert listed(html) == sorted(MODELS)
    assert "3 models listed by the endpoint." in html
    assert len(model_requests(fake)) == 1

    html = panel(ada, conversation)
    assert listed(html) == sorted(MODELS)
    assert "3 models listed by the endpoint (cached)." in html
    assert len(model_requests(fake)) == 1, "a cache hit asks nobody"

    url = reverse("chat:conversation_models", args=[conversation.pk])
    profile = {"picker-profile": conversation.profile_id}
    fake.models = ["fake-new"]
    html = ada.get(url, profile).content.decode()
    assert listed(html) == sorted(MODELS) and len(model_requests(fake)) == 1
    html = ada.get(url, {**profile, "refresh": "1"}).content.decode()
    assert listed(html) == ["fake-new"]
    assert len(model_requests(fake)) == 2, "Refresh models asks the endpoint again"
    assert 'id="picker-status" hx-swap-oob="innerHTML">1 model listed by the endpoint.' in html


def test_a_listing_that_fails_says_why_in_one_line_and_free_text_still_saves(
    ada: Client, owner: Any, fake: FakeOpenAIServer
) -> None:
    conversation = on(owner, fake.base_url + "/nowhere")

    html = panel(ada, conversation)
    status = re.search(r'<p id="picker-status"[^>]*>(.*?)</p>', html, re.DOTALL)
    assert status is not None
    assert "The models could not be listed (HTTP 404: no route for GET" in status.group(1)
    assert "\n" not in status.group(1) and listed(html) == []

    html = panel(ada, conversation)
    assert len(model_requests(fake)) == 2, "a failure is not cached"

    response = ada.post(
        reverse("chat:conversation_model", args=[conversation.pk]),
        {"picker-profile": conversation.profile_id, "picker-model": "typed-by-hand"},
    )
    assert response.status_code == 200
    conversation.refresh_from_db()
    assert conversation.agent_parameters().model == "typed-by-hand"


def test_a_key_goes_only_to_its_own_endpoint(
    ada: Client, owner: Any, fake: FakeOpenAIServer, settings: Any, monkeypatch: Any
) -> None:
    settings.OPENAI_API_KEY = "sk-environment-secret"
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    monkeypatch.setenv("AGENTLAB_KEY_FAKE", "sk-profile-secret")

    # A profile without a key variable gets no key, not the environment's.
    keyless = on(owner, fake.base_url, name="keyless")
    html = panel(ada, keyless)
    assert listed(html) == sorted(MODELS)
    assert "authorization" not in model_requests(fake)[-1].headers

    # A profile's own variable goes to the profile's own URL (another cache entry).
    keyed = on(owner, fake.base_url, key="AGENTLAB_KEY_FAKE", name="keyed")
    html = panel(ada, keyed)
    assert model_requests(fake)[-1].headers["authorization"] == "Bearer sk-profile-secret"
    assert len(model_requests(fake)) == 2
    assert "secret" not in html

    # The server default sends OPENAI_API_KEY to OPENAI_BASE_URL only.
    settings.OPENAI_BASE_URL = fake.base_url
    url = reverse("chat:conversation_models", args=[keyed.pk])
    html = ada.get(url, {"picker-profile": ""}).content.decode()
    assert model_requests(fake)[-1].headers["authorization"] == "Bearer sk-environment-secret"
    assert "secret" not in html


def test_saving_provider_and_model_applies_to_the_next_run_and_keeps_the_rest(
    ada: Client, owner: Any, fake: FakeOpenAIServer
) -> None:
    conversation = make.conversation(owner, "Picked", temperature=0.3)
    profile = ProviderProfile.objects.create(
        name="fake", base_url=fake.base_url, model="fake-model", available_to_everyone=True
    )
    url = reverse("chat:conversation_model", args=[conversation.pk])

    response = ada.post(url, {"picker-profile": profile.pk, "picker-model": " fake-large "})

    assert response.status_code == 200
    html = response.content.decode()
    assert 'aria-label="Model: fake · fake-large"' in html
    assert 'aria-expanded="false"' in html and " autofocus" in html
    assert "<html" not in html
    conversation.refresh_from_db()
    assert conversation.profile == profile
    parameters = conversation.agent_parameters()
    assert parameters.model == "fake-large" and parameters.temperature == 0.3

    # An empty model means the provider's own; back to the server default.
    ada.post(url, {"picker-profile": profile.pk, "picker-model": ""})
    conversation.refresh_from_db()
    assert conversation.agent_parameters().model is None
    response = ada.post(url, {"picker-profile": "", "picker-model": ""})
    assert (
        'aria-label="Model: Server default · Scripted model (offline)"' in response.content.decode()
    )
    conversation.refresh_from_db()
    assert conversation.profile is None


def test_an_invalid_model_shows_one_clear_line_and_changes_nothing(ada: Client, owner: Any) -> None:
    conversation = make.conversation(owner, "Picked", model="kept")
    before = conversation.parameters

    response = ada.post(
        reverse("chat:conversation_model", args=[conversation.pk]),
        {"picker-profile": "", "picker-model": "x" * 201},
    )

    assert response.status_code == 422
    html = response.content.decode()
    errors = re.findall(r'<p class="field-error" role="alert">([^<]*)</p>', html)
    assert errors == ["Model: Ensure this value has at most 200 characters (it has 201)."]
    assert 'aria-expanded="true"' in html and 'id="model-popover"' in html
    conversation.refresh_from_db()
    assert conversation.parameters == before


def test_a_provider_the_user_may_not_use_is_neither_listed_nor_saved(
    ada: Client, owner: Any, fake: FakeOpenAIServer
) -> None:
    conversation = make.conversation(owner, "Picked")
    closed = ProviderProfile.objects.create(name="closed", base_url=fake.base_url, model="m")

    assert "closed" not in panel(ada, conversation)
    url = reverse("chat:conversation_models", args=[conversation.pk])
    for value in [closed.pk, "nonsense"]:
        html = ada.get(url, {"picker-profile": value}).content.decode()
        assert NOT_USABLE in html and listed(html) == []
    response = ada.post(
        reverse("chat:conversation_model", args=[conversation.pk]),
        {"picker-profile": closed.pk, "picker-model": "m"},
    )
    assert response.status_code == 422
    html = response.content.decode()
    errors = re.findall(r'<p class="field-error" role="alert">([^<]*)</p>', html)
    assert errors == ["Provider: not one you may use: choose another one."]
    assert NOT_USABLE not in html, "one line says it"
    assert fake.requests == []
    conversation.refresh_from_db()
    assert conversation.profile is None and conversation.agent_parameters().model is None


def test_only_the_owner_reaches_the_picker_and_only_logged_in(owner: Any) -> None:
    theirs = make.conversation(make.user("mallory"), "theirs", model="theirs")
    client = Client()
    client.force_login(owner)
    urls = [
        reverse("chat:conversation_model", args=[theirs.pk]),
        reverse("chat:conversation_models", args=[theirs.pk]),
    ]
    for url in urls:
        assert client.get(url).status_code == 404
    assert client.post(urls[0], {"picker-profile": "", "picker-model": "mine"}).status_code == 404
    theirs.refresh_from_db()
    assert theirs.agent_parameters().model == "theirs"

    anonymous = Client()
    for url in urls:
        response = anonymous.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]
    assert anonymous.post(urls[0], {"picker-model": "x"}).status_code == 302
