"""The Evaluations pages' forms: the Run form (a case set on one target) and the Compare form
(the same cases on 2 or 3 targets). A target is the server's default endpoint (with an optional
model name) or a provider profile the user may use, never a URL typed here: a key only ever goes
to its own endpoint."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from chat.evals import compare, replay
from chat.forms import DEFAULT_PROVIDER_LABEL, default_model
from chat.models import CaseSet, Conversation, ProviderProfile
from chat.runs import RunRefused, endpoint

DEFAULT_TARGET = "default"
PROFILE = "profile-"
MAX_REPEAT = 20
NOT_USABLE = "You may not use this provider profile: choose another target."


class TargetField(forms.ChoiceField):
    """The server's default endpoint, or a provider profile the user may use; a profile they
    may not use is refused by name of the rule, not as an unknown choice. With `empty_label`,
    choosing no target is a choice too."""

    def __init__(self, *, empty_label: str = "", **kwargs: Any) -> None:
        super().__init__(required=not empty_label, **kwargs)
        self.empty_label = empty_label

    def validate(self, value: Any) -> None:
        if value and not self.valid_value(value) and str(value).startswith(PROFILE):
            number = str(value).removeprefix(PROFILE)
            if number.isdigit() and ProviderProfile.objects.filter(pk=int(number)).exists():
                raise ValidationError(NOT_USABLE, code="not_usable")
        super().validate(value)


class EvalForm(forms.Form):
    """What the Run and Compare forms share: targets (`default` or `profile-<id>`) each with an
    optional model, and the attempts per case."""

    targets: Sequence[tuple[str, str]] = ()
    """(target field, model field) pairs."""
    repeat_limit = MAX_REPEAT

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        kwargs.setdefault("auto_id", "eval-%s")
        super().__init__(*args, **kwargs)
        self.profiles = {
            f"{PROFILE}{profile.pk}": profile for profile in ProviderProfile.objects.usable_by(user)
        }
        scripted = endpoint()
        choices = [(DEFAULT_TARGET, f"{DEFAULT_PROVIDER_LABEL} · {scripted.label}")]
        choices += [
            (value, f"{profile.name} · {profile.model}" if profile.model else profile.name)
            for value, profile in self.profiles.items()
        ]
        defaults = {DEFAULT_TARGET: default_model(None)} | {
            value: default_model(profile) for value, profile in self.profiles.items()
        }
        for target_name, model_name in self.targets:
            field = self.fields[target_name]
            assert isinstance(field, TargetField)
            field.choices = [("", field.empty_label)] * bool(field.empty_label) + choices
            # The model field's placeholder follows the choice (static/js/chat.js).
            field.widget.attrs["data-default-models"] = json.dumps({"": ""} | defaults)
            field.widget.attrs["data-model-field"] = self[model_name].auto_id
            chosen = self[target_name].value() or DEFAULT_TARGET
            self.fields[model_name].widget.attrs["placeholder"] = defaults.get(chosen, "")
        repeat = self.fields["repeat"]
        repeat.widget.attrs.update({"min": 1, "max": self.repeat_limit})

    def chosen(self) -> list[replay.Target]:
        """The valid form's targets; a target that cannot be used is a form error (empty)."""
        found = []
        for target_name, model_name in self.targets:
            value = self.cleaned_data.get(target_name)
            if not value:
                continue
            profile = self.profiles.get(value)
            try:
                found.append(
                    replay.target(profile=profile, model=self.cleaned_data.get(model_name))
                )
            except RunRefused as exc:
                self.add_error(target_name, str(exc))
                return []
        return found

    @property
    def error(self) -> str:
        """The one line a refused form shows: its first error, fields in order."""
        for error in self.non_field_errors():
            return str(error)
        for name in self.fields:
            for error in self.errors.get(name, ()):
                return str(error)
        return ""


def _target(label: str, *, optional: str = "") -> TargetField:
    return TargetField(
        label=label,
        empty_label=optional,
        initial="" if optional else DEFAULT_TARGET,
        error_messages={
            "required": "Choose a target.",
            "invalid_choice": "Choose a target from the list.",
        },
    )


def _model(label: str = "Model") -> forms.CharField:
    return forms.CharField(
        label=label,
        required=False,
        max_length=200,
        error_messages={"max_length": "A model name has at most 200 characters."},
    )


def _repeat(limit: int) -> forms.IntegerField:
    message = f"Repeat takes 1 to {limit} attempts per case."
    return forms.IntegerField(
        label="Repeat",
        initial=1,
        min_value=1,
        max_value=limit,
        error_messages={
            "required": message,
            "invalid": message,
            "min_value": message,
            "max_value": message,
        },
    )


def _case_set(*, required: bool = True) -> forms.ModelChoiceField[CaseSet]:
    return forms.ModelChoiceField(
        queryset=CaseSet.objects.all(),
        label="Case set",
        required=required,
        empty_label=None if required else "Choose a case set",
        error_messages={
            "required": "Choose a case set.",
            "invalid_choice": "That case set does not exist any more: choose another.",
        },
    )


class RunForm(EvalForm):
    """Replay a case set on one target."""

    targets = (("target", "model"),)

    case_set = _case_set()
    target = _target("Target")
    model = _model()
    repeat = _repeat(MAX_REPEAT)
    continue_loop = forms.BooleanField(
        label="Continue to the final answer (tools answered from recorded results)",
        required=False,
    )


class CompareForm(EvalForm):
    """Replay the same cases (a set, or a conversation's last turn) on 2 or 3 targets."""

    targets = (("target_1", "model_1"), ("target_2", "model_2"), ("target_3", "model_3"))
    repeat_limit = compare.MAX_REPEAT

    case_set = _case_set(required=False)
    target_1 = _target("Target 1")
    model_1 = _model("Model of target 1")
    target_2 = _target("Target 2")
    model_2 = _model("Model of target 2")
    target_3 = _target("Target 3", optional="No third target")
    model_3 = _model("Model of target 3")
    repeat = _repeat(compare.MAX_REPEAT)

    def __init__(self, *args: Any, conversation: Conversation | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.conversation = conversation

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.conversation is None and not data.get("case_set"):
            self.add_error("case_set", "Choose a case set.")
        return data
