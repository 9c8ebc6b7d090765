"""The model picker in a conversation's header: the provider and model of the next run, with the
models the endpoint lists. Saving goes through the settings panel's rules (ConversationSettings):
one rule, one place. A run in progress keeps what it started with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods

from chat import access
from chat.forms import DEFAULT_PROVIDER_LABEL, ConversationSettings, EndpointForm
from chat.models import Conversation, ProviderProfile
from chat.runs import catalog
from chat.runs.providers import Endpoint, conversation_endpoint, endpoint

TEMPLATE = "chat/model_picker.html"
NOT_USABLE = "You may not use this provider: choose another one."


@dataclass(frozen=True)
class ModelChoice:
    """What the header's button says: the provider, and the model the next run asks for."""

    provider: str
    model: str

    @property
    def label(self) -> str:
        return f"{self.provider} · {self.model}"

    @classmethod
    def of(cls, conversation: Conversation) -> ModelChoice:
        profile = conversation.profile
        provider = profile.name if profile is not None else DEFAULT_PROVIDER_LABEL
        return cls(provider, conversation_endpoint(conversation).label)


class ModelPicker(ConversationSettings):
    """Provider and model only, validated and saved as the settings panel does."""

    def __init__(self, conversation: Conversation, data: Any = None, *, user: Any) -> None:
        super().__init__(conversation)
        self.form = EndpointForm(
            data,
            user=user,
            profile=conversation.profile,
            initial={"model": self.current.model or "", "profile": conversation.profile_id},
            prefix="picker",
        )
        self.form.fields["profile"].error_messages["invalid_choice"] = (
            "not one you may use: choose another one."
        )
        self.form.fields["model"].widget.attrs.update(
            autofocus=True, autocomplete="off", spellcheck="false", **{"data-model-input": ""}
        )

    def is_valid(self) -> bool:
        if not self.form.is_valid():
            return False
        return self._validated({"model": self.form.cleaned_data["model"] or None})

    @property
    def errors(self) -> list[str]:
        """Every problem as one line, its field named."""
        named = [
            f"{self.form.fields[name].label or name.capitalize()}: {error}"
            for name, errors in self.form.errors.items()
            if name in self.form.fields
            for error in errors
        ]
        return [*self.form.non_field_errors(), *named, *self.non_field_errors]


@dataclass
class _State:
    conversation: Conversation
    picker: ModelPicker
    target: Endpoint | None
    """Whose models to list: None when the user may not use the chosen provider."""
    saved: bool = False


def _state(user: Any, pk: int, data: Any, chosen: str | None) -> _State:
    """The conversation (one the user may configure), the picker, saved if posted and valid,
    and the endpoint to list: `chosen` (a profile id, "" for the server default) or the saved
    one."""
    conversation = access.conversation(
        user, access.Action.CONFIGURE, pk, Conversation.objects.select_related("profile")
    )
    picker = ModelPicker(conversation, data, user=user)
    if data is not None and picker.is_valid():
        picker.save()
        return _State(conversation, picker, None, saved=True)
    value = str(conversation.profile_id or "") if chosen is None else chosen
    if not value:
        return _State(conversation, picker, endpoint(None))
    usable = ProviderProfile.objects.usable_by(user)
    profile = usable.filter(pk=value).first() if value.isdigit() else None
    if profile is None and data is not None:
        # Refused: the form shows the server default again, and so does the list.
        return _State(conversation, picker, endpoint(None))
    return _State(conversation, picker, endpoint(profile) if profile is not None else None)


async def _listing(state: _State, *, refresh: bool = False) -> catalog.ModelList:
    if state.target is None:
        return catalog.ModelList(error=NOT_USABLE)
    return await catalog.list_models(state.target, refresh=refresh)


@login_required
@require_http_methods(["GET", "POST"])
async def conversation_model(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: the picker's panel with the endpoint's models. POST: save provider and model; the
    header's picker comes back closed with the new label, or open with the reason, unsaved."""
    user = await request.auser()
    data = await sync_to_async(lambda: request.POST)() if request.method == "POST" else None
    chosen = data.get("picker-profile", "") if data is not None else None
    state = await sync_to_async(_state)(user, pk, data, chosen)
    context: dict[str, Any] = {"conversation": state.conversation, "picker": state.picker}
    if state.saved:
        partial, status = "picker", 200
        context.update(picker_saved=True)
    else:
        partial, status = ("panel", 200) if data is None else ("picker", 422)
        context.update(listing=await _listing(state), picker_open=True)
    return await sync_to_async(_render)(request, partial, context, status)


@login_required
@require_GET
async def conversation_models(request: HttpRequest, pk: int) -> HttpResponse:
    """The models of the provider chosen in the picker (`picker-profile`); `refresh=1` asks the
    endpoint again instead of the cache."""
    user = await request.auser()
    chosen = request.GET.get("picker-profile", "")
    state = await sync_to_async(_state)(user, pk, None, chosen)
    listing = await _listing(state, refresh=request.GET.get("refresh") == "1")
    context = {"conversation": state.conversation, "listing": listing, "oob": True}
    return await sync_to_async(_render)(request, "models", context, 200)


def _render(
    request: HttpRequest, partial: str, context: dict[str, Any], status: int
) -> HttpResponse:
    if "picker" in context and "model_choice" not in context:
        context["model_choice"] = ModelChoice.of(context["conversation"])
    return render(request, f"{TEMPLATE}#{partial}", context, status=status)
