"""The Evaluations pages' forms: the Run form (a case set on one target) and the Compare form
(the same cases on 2 or 3 targets). A target is the server's default endpoint (with an optional
model name), a provider profile the user may use, or a version of an agent they may use (its own
endpoint, model and settings); never a URL typed here: a key only ever goes to its own endpoint."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import Case as Pick
from django.db.models import F, Max, Q, QuerySet, Value, When, Window
from django.db.models.functions import Lower, RowNumber

from chat import access
from chat.access import AgentAction
from chat.evals import compare, replay
from chat.forms import DEFAULT_PROVIDER_LABEL, default_model
from chat.models import Agent, AgentVersion, CaseSet, Conversation, ProviderProfile
from chat.runs import RunRefused, endpoint

DEFAULT_TARGET = "default"
PROFILE = "profile-"
AGENT = "agent-"
MAX_REPEAT = 20
VERSIONS_OFFERED = 10
"""Versions of each agent a target list offers: its published one and its newest others."""
NOT_USABLE = "You may not use this provider profile: choose another target."
GONE = "That agent version does not exist any more: choose another target."
NOT_USABLE_ENDPOINT = "{version} uses a provider profile you may not use: choose another target."
OWN_MODEL = "{version} brings its own model: leave the model empty."


def usable_versions(user: Any) -> QuerySet[AgentVersion]:
    """The versions `user` may replay: of an agent they may use, on the server's endpoint or a
    provider profile they may use."""
    return AgentVersion.objects.filter(
        Q(profile__isnull=True) | Q(profile__in=ProviderProfile.objects.usable_by(user)),
        agent__in=access.agents(user, AgentAction.USE),
    )


def offered_versions(user: Any) -> list[AgentVersion]:
    """What the target lists offer of agents: per agent (by name), its published version and
    its newest others, VERSIONS_OFFERED in all, newest first; one query."""
    published_first = Pick(When(pk=F("agent__published_id"), then=Value(0)), default=Value(1))
    rank = Window(
        RowNumber(), partition_by=F("agent_id"), order_by=[published_first, F("number").desc()]
    )
    return list(
        usable_versions(user)
        .annotate(rank=rank)
        .filter(rank__lte=VERSIONS_OFFERED)
        .select_related("agent", "profile")
        .order_by(Lower("agent__name"), "agent_id", "-number")
    )


def own_model(version: AgentVersion) -> str:
    """The model a version replays on (its own, else its endpoint's), for the model field."""
    try:
        model = version.agent_parameters().model
    except ValueError:
        return ""
    return model or default_model(version.profile)


class TargetField(forms.ChoiceField):
    """The server's default endpoint, a provider profile or an agent version the user may use;
    a profile or version they may not use is refused by name of the rule, not as an unknown
    choice. With `empty_label`, choosing no target is a choice too."""

    def __init__(self, *, empty_label: str = "", **kwargs: Any) -> None:
        super().__init__(required=not empty_label, **kwargs)
        self.empty_label = empty_label
        self.version_of: Callable[[str], AgentVersion] | None = None
        """Set by the form: the version `agent-<pk>` names, or ValidationError in one line."""

    def validate(self, value: Any) -> None:
        named = str(value or "")
        if named.startswith(AGENT) and named.removeprefix(AGENT).isdigit() and self.version_of:
            # Any version the user may use, listed or older than the list goes.
            self.version_of(named)
            return
        if value and not self.valid_value(value) and str(value).startswith(PROFILE):
            number = str(value).removeprefix(PROFILE)
            if number.isdigit() and ProviderProfile.objects.filter(pk=int(number)).exists():
                raise ValidationError(NOT_USABLE, code="not_usable")
        super().validate(value)


class EvalForm(forms.Form):
    """What the Run and Compare forms share: targets (`default`, `profile-<id>` or
    `agent-<version id>`) each with an optional model, and the attempts per case."""

    targets: Sequence[tuple[str, str]] = ()
    """(target field, model field) pairs."""
    repeat_limit = MAX_REPEAT

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        kwargs.setdefault("auto_id", "eval-%s")
        super().__init__(*args, **kwargs)
        self.user = user
        self.profiles = {
            f"{PROFILE}{profile.pk}": profile for profile in ProviderProfile.objects.usable_by(user)
        }
        self.versions = {f"{AGENT}{version.pk}": version for version in offered_versions(user)}
        scripted = endpoint()
        endpoints = [(DEFAULT_TARGET, f"{DEFAULT_PROVIDER_LABEL} · {scripted.label}")]
        endpoints += [
            (value, f"{profile.name} · {profile.model}" if profile.model else profile.name)
            for value, profile in self.profiles.items()
        ]
        offered = [
            (value, f"{version} (published)" if version.is_published else str(version))
            for value, version in self.versions.items()
        ]
        choices: list[Any] = (
            [("Endpoints", endpoints), ("Agents", offered)] if offered else endpoints
        )
        defaults = (
            {DEFAULT_TARGET: default_model(None)}
            | {value: default_model(profile) for value, profile in self.profiles.items()}
            | {value: own_model(version) for value, version in self.versions.items()}
        )
        for target_name, model_name in self.targets:
            field = self.fields[target_name]
            assert isinstance(field, TargetField)
            field.choices = [("", field.empty_label)] * bool(field.empty_label) + choices
            field.version_of = self.version_of
            # The model field's placeholder follows the choice; an agent version's model is
            # its own, so the field is disabled beside it (static/js/chat.js).
            field.widget.attrs["data-default-models"] = json.dumps({"": ""} | defaults)
            field.widget.attrs["data-model-field"] = self[model_name].auto_id
            field.widget.attrs["data-own-model"] = AGENT
            chosen = self[target_name].value() or DEFAULT_TARGET
            self.fields[model_name].widget.attrs["placeholder"] = defaults.get(chosen, "")
        repeat = self.fields["repeat"]
        repeat.widget.attrs.update({"min": 1, "max": self.repeat_limit})

    def version_of(self, value: str) -> AgentVersion:
        """The agent version `agent-<pk>` names, if the user may replay it now: its agent
        usable by them, its endpoint the server's or a profile they may use. ValidationError
        in one line: deleted, a private agent of someone else's, a profile not theirs."""
        if value in self.versions:
            return self.versions[value]
        found = (
            AgentVersion.objects.select_related("agent", "profile")
            .filter(pk=int(value.removeprefix(AGENT)))
            .first()
        )
        if found is None:
            raise ValidationError(GONE, code="gone")
        if refused := access.agent_denied(self.user, AgentAction.USE, found.agent):
            raise ValidationError(refused, code="not_usable")
        usable = ProviderProfile.objects.usable_by(self.user)
        if found.profile_id is not None and not usable.filter(pk=found.profile_id).exists():
            message = NOT_USABLE_ENDPOINT.format(version=found)
            raise ValidationError(message, code="not_usable")
        self.versions[value] = found
        return found

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for target_name, model_name in self.targets:
            version = self.versions.get(data.get(target_name) or "")
            if version is not None and data.get(model_name):
                self.add_error(model_name, OWN_MODEL.format(version=version))
        return data

    def chosen(self) -> list[replay.Target]:
        """The valid form's targets; a target that cannot be used is a form error (empty)."""
        found = []
        for target_name, model_name in self.targets:
            value = self.cleaned_data.get(target_name)
            if not value:
                continue
            version = self.versions.get(value)
            try:
                if version is not None:
                    found.append(replay.target(version=version))
                else:
                    profile = self.profiles.get(value)
                    model = self.cleaned_data.get(model_name)
                    found.append(replay.target(profile=profile, model=model))
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


def remembered_case_set(user: Any) -> int | None:
    """The case set the Compare form starts with: the only one there is, else the one `user`
    last replayed (an evaluation or a comparison of theirs); None when neither. One query."""
    mine = Q(eval_runs__started_by=user) if getattr(user, "is_authenticated", False) else Q(pk=None)
    found = list(
        CaseSet.objects.annotate(used=Max("eval_runs__started_at", filter=mine))
        .order_by(F("used").desc(nulls_last=True), "pk")
        .values_list("pk", "used")[:2]
    )
    if len(found) == 1 or (found and found[0][1] is not None):
        return int(found[0][0])
    return None


def agent_comparison(user: Any, agent: Agent) -> tuple[dict[str, Any], list[str]]:
    """The Compare form's first choices for comparing an agent's versions: its published
    version and its newest other one, on its suite; with the lines saying what is left to
    choose (one version only, no suite)."""
    mine = usable_versions(user).filter(agent=agent).select_related("agent").order_by("-number")
    published = mine.filter(pk=agent.published_id).first() if agent.published_id else None
    first = published or mine.first()
    other = None if first is None else mine.exclude(pk=first.pk).first()
    initial: dict[str, Any] = {}
    lines = []
    if agent.suite_id is not None:
        initial["case_set"] = agent.suite_id
    else:
        lines.append(f"{agent} has no suite: choose a case set.")
    if first is None:
        lines.append(f"{agent} has no version you may replay: choose the targets.")
    else:
        initial["target_1"] = f"{AGENT}{first.pk}"
    if other is not None:
        initial["target_2"] = f"{AGENT}{other.pk}"
    elif first is not None:
        lines.append(f"{first} is the only version you may replay: choose what to compare it with.")
    return initial, lines
