"""Forms: agent settings (validated through AgentParameters, the single source of rules),
provider profiles, and the edited tool result of a fork."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from django import forms
from django.core.exceptions import ValidationError as DjangoValidationError
from pydantic import ValidationError

from chat import agent
from chat.agent.contracts import MAX_EVENT_LOOPS, error_text
from chat.agent.messages import ROLES
from chat.agent.redaction import looks_secret
from chat.models import Conversation, ProviderProfile
from chat.runs import mcp
from chat.runs.providers import KeyStatus, endpoint, key_status, key_variable_problem
from chat.tool_choices import ToolGroup, flat
from chat.transcripts.forks import MAX_TOOL_RESULT_CHARS

DEFAULT_PROVIDER_LABEL = "Server default"
PROVIDER_DEFAULT = "provider default"
DEFAULT_EVENT_LOOPS = agent.AgentParameters().max_event_loops


def base_url_problem(url: str) -> str | None:
    """Why `url` cannot be a profile's base URL: not http(s), or it carries credentials."""
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https"):
        return "The base URL must start with http:// or https://."
    if "@" in parts.netloc:
        return (
            "The base URL carries credentials: keys are never stored here; put the key in an "
            "environment variable and give its name instead."
        )
    names = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)]
    if any(looks_secret(name) for name in names):
        return (
            "The base URL carries a key in its query string: keys are never stored here; put "
            "the key in an environment variable and give its name instead."
        )
    return None


def missing_key_warning(profile: ProviderProfile | None) -> str | None:
    """The warning for a profile whose key variable is not set here or not allowed, else None.

    Of a variable that is not allowed, it says only that: not whether it exists, nor its name.
    """
    if profile is None:
        return None
    status = key_status(profile.api_key_env)
    if status is KeyStatus.NOT_ALLOWED:
        return (
            "The server does not allow this provider's key variable: runs with it are refused "
            "until an administrator fixes the profile."
        )
    if status is KeyStatus.UNSET:
        return (
            f"{profile.api_key_env} is not set on the server; requests will be sent without a key."
        )
    return None


class ProviderProfileForm(forms.ModelForm[ProviderProfile]):
    """A profile as staff edit it in the admin and check_provider writes it: same rules."""

    class Meta:
        model = ProviderProfile
        fields = (
            "name",
            "base_url",
            "api_key_env",
            "model",
            "tool_call_content",
            "tool_call_ids",
            "reasoning_field",
            "parallel_tool_calls",
            "accepts_images",
            "available_to_everyone",
            "notes",
        )
        labels = {"api_key_env": "API key environment variable", "base_url": "Base URL"}

    def clean_api_key_env(self) -> str:
        return self._checked("api_key_env", key_variable_problem)

    def clean_base_url(self) -> str:
        return self._checked("base_url", base_url_problem)

    def _checked(self, field: str, problem_of: Callable[[str], str | None]) -> str:
        """The stripped value of `field`, or the rule's reason why it cannot be used."""
        value = str(self.cleaned_data.get(field) or "").strip()
        problem = problem_of(value)
        if problem:
            raise DjangoValidationError(problem, code="invalid")
        return value


def default_model(profile: ProviderProfile | None) -> str:
    """What an empty model field means on this provider: its endpoint's own model."""
    return endpoint(profile).model or "model not set"


class ProviderSelect(forms.Select):
    """Says each choice's default model (`data-default-models`, JSON): the model field's
    placeholder follows the choice (static/js/chat.js)."""

    def get_context(self, name: str, value: Any, attrs: Any) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        defaults = {
            str(getattr(choice, "value", choice)): default_model(getattr(choice, "instance", None))
            for choice, _ in self.choices
        }
        context["widget"]["attrs"]["data-default-models"] = json.dumps(defaults)
        return context


class ProviderChoiceField(forms.ModelChoiceField[ProviderProfile]):
    widget = ProviderSelect

    def label_from_instance(self, obj: Any) -> str:
        return f"{obj.name} · {obj.model}" if obj.model else str(obj.name)


class SystemPromptForm(forms.Form):
    content = forms.CharField(
        label="System prompt", required=False, widget=forms.Textarea(attrs={"rows": 3})
    )


class PreMessageForm(forms.Form):
    # A pre-message cannot answer a tool call (AgentParameters says why): `tool` is not offered.
    role = forms.ChoiceField(
        choices=[(role, role) for role in ROLES if role != "tool"], initial="user"
    )
    content = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))


# absolute_max = max_num: a posted TOTAL_FORMS above it is an error shown on the page, and never
# builds (and renders back) Django's default of max_num + 1,000 forms.
MAX_ROWS = {"system": 20, "pre": 50}
SystemPromptFormSet = forms.formset_factory(
    SystemPromptForm, extra=1, max_num=MAX_ROWS["system"], absolute_max=MAX_ROWS["system"]
)
PreMessageFormSet = forms.formset_factory(
    PreMessageForm, extra=1, max_num=MAX_ROWS["pre"], absolute_max=MAX_ROWS["pre"]
)


def _placeholder(text: object) -> forms.NumberInput:
    return forms.NumberInput(attrs={"placeholder": str(text)})


class EndpointForm(forms.Form):
    """Provider and model: the settings panel's first fields, and all of the model picker."""

    profile = ProviderChoiceField(
        queryset=ProviderProfile.objects.none(),
        required=False,
        empty_label=DEFAULT_PROVIDER_LABEL,
        label="Provider",
        help_text="Where the requests go. Server default: the endpoint configured on the server.",
    )
    model = forms.CharField(
        required=False,
        max_length=200,
        help_text="Empty: the provider's model (the profile's, else the server's default).",
    )

    def __init__(
        self, *args: Any, user: Any, profile: ProviderProfile | None = None, **kwargs: Any
    ) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        field = self.fields["profile"]
        assert isinstance(field, ProviderChoiceField)
        # Only the profiles this user may use are offered, and only they are accepted.
        self.usable_profiles = ProviderProfile.objects.usable_by(user)
        field.queryset = self.usable_profiles
        field.widget.attrs["data-model-field"] = self["model"].auto_id
        self.fields["model"].widget.attrs["placeholder"] = default_model(profile)


class AgentSettingsForm(EndpointForm):
    temperature = forms.FloatField(
        required=False,
        min_value=0,
        max_value=2,
        step_size=None,
        widget=_placeholder(PROVIDER_DEFAULT),
    )
    top_p = forms.FloatField(
        required=False,
        min_value=0,
        max_value=1,
        label="Top p",
        widget=_placeholder(PROVIDER_DEFAULT),
    )
    max_tokens = forms.IntegerField(
        required=False, min_value=1, label="Max tokens", widget=_placeholder(PROVIDER_DEFAULT)
    )
    max_event_loops = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_EVENT_LOOPS,
        label="Max event loops",
        help_text=f"Model turns per run. Empty: the server default, {DEFAULT_EVENT_LOOPS}.",
        widget=_placeholder(DEFAULT_EVENT_LOOPS),
    )
    enabled_tools = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Enabled tools"
    )

    def __init__(self, *args: Any, tools: Sequence[ToolGroup], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["enabled_tools"]
        assert isinstance(field, forms.MultipleChoiceField)
        field.choices = flat(tools)


class ConversationSettings:
    """A conversation's provider and AgentParameters, edited through a form: the rules of
    AgentParameters apply to every way of changing them, and both are saved together."""

    conversation: Conversation
    current: agent.AgentParameters
    form: EndpointForm

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.current = conversation.agent_parameters()
        self.parameters: agent.AgentParameters | None = None
        self.non_field_errors: list[str] = []

    def _validated(self, candidate: dict[str, Any], pre_forms: Sequence[forms.Form] = ()) -> bool:
        try:
            known = mcp.known_tool_names()
            self.parameters = self.current.changed(**candidate, known_tools=known)
        except ValidationError as exc:
            self._attach(exc, pre_forms)
            return False
        return True

    def _attach(self, exc: ValidationError, pre_forms: Sequence[forms.Form]) -> None:
        for error in exc.errors():
            message = error_text(error)
            loc = error["loc"]
            if loc and loc[0] == "pre_messages":
                index = _index_in(message, loc)
                if index is not None and index < len(pre_forms):
                    pre_forms[index].add_error("role", message)
                    continue
            if loc and loc[0] in self.form.fields:
                self.form.add_error(str(loc[0]), message)
            else:
                self.non_field_errors.append(message)

    @property
    def profile(self) -> ProviderProfile | None:
        """The chosen profile: once posted, the submitted one (None unless a valid choice);
        before that, the saved one."""
        if self.form.is_bound:
            return (getattr(self.form, "cleaned_data", None) or {}).get("profile")
        return self.conversation.profile

    @property
    def key_warning(self) -> str | None:
        """Non-blocking: the saved profile may no longer be used by this user, or the chosen
        one names a key variable that is not set here (or not allowed)."""
        saved = self.conversation.profile
        usable = self.form.usable_profiles
        if not self.form.is_bound and saved and not usable.filter(pk=saved.pk).exists():
            return (
                f"You may no longer use the provider {saved.name!r}: runs are refused until "
                "you choose another one."
            )
        return missing_key_warning(self.profile)

    def save(self) -> None:
        """Parameters and provider together, in one UPDATE: both or neither."""
        assert self.parameters is not None
        self.conversation.set_agent_parameters(self.parameters)
        self.conversation.profile = self.form.cleaned_data.get("profile")
        self.conversation.save(update_fields=["parameters", "profile", "updated_at"])


def _index_in(message: str, loc: tuple[Any, ...]) -> int | None:
    if len(loc) > 1 and isinstance(loc[1], int):
        return loc[1]
    if "pre_messages[" in message:
        return int(message.split("pre_messages[", 1)[1].split("]", 1)[0])
    return None


class ToolForkForm(forms.Form):
    result = forms.CharField(
        required=False,
        strip=False,
        max_length=MAX_TOOL_RESULT_CHARS,
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false"}),
        label="Result the model sees",
        error_messages={
            "max_length": "The result is too long: %(show_value)s characters "
            "(the limit is %(limit_value)s)."
        },
    )
    failed = forms.BooleanField(
        required=False,
        label="Mark as failed",
        help_text='The model gets {"error": <the text above>}. Leave the text unchanged to say '
        "only that the call was marked failed by the user.",
    )
