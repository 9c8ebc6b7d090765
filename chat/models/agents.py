"""Agents: a named configuration the team chats with, in immutable versions, one published.

A version holds an endpoint (a provider profile, or the server's own) and validated
AgentParameters. It never changes once saved: a change is a new version. A conversation records
the version it started from; whether its settings changed since is derived, never stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from chat.agent.contracts import AgentParameters, validation_text

from .evals import CaseSet
from .providers import ProviderProfile

if TYPE_CHECKING:
    from .conversations import Conversation

BUILT_IN_NAME = "Default"
"""The built-in agent: the server's own settings. No stored agent takes its name or slug."""
NAME_CHARS = 100


def validate_text(value: str) -> None:
    """Text every database stores and every page renders (the bounded gate)."""
    # Imported here: chat.transcripts imports these models.
    from chat.transcripts.limits import JsonRefused, storable

    try:
        storable(value)
    except JsonRefused as exc:
        raise ValidationError(str(exc)[:1].upper() + str(exc)[1:] + ".", code="text") from None


def validate_note(value: str) -> None:
    """A description or a version's note: as long as a note may be anywhere, and storable."""
    from chat.transcripts.limits import NOTE_CHARS

    if len(value) > NOTE_CHARS:
        raise ValidationError(
            "%(length)s characters, more than the %(limit)s allowed.",
            code="too_long",
            params={"length": f"{len(value):,}", "limit": f"{NOTE_CHARS:,}"},
        )
    validate_text(value)


def validate_name(value: str) -> None:
    """A name commands can write as NAME@N, and not the built-in agent's."""
    if "@" in value:
        raise ValidationError(
            "An agent's name cannot hold “@”: NAME@N names its version N.", code="at"
        )
    if value.strip().casefold() == BUILT_IN_NAME.casefold():
        raise ValidationError(
            f"“{BUILT_IN_NAME}” is the built-in agent (the server's own settings): choose "
            "another name.",
            code="reserved",
        )
    if value != value.strip():
        raise ValidationError("An agent's name cannot start or end with a space.", code="space")


def stored_parameters(value: AgentParameters | Mapping[str, Any]) -> dict[str, Any]:
    """`value` as a version stores it: through the bounded gate, then AgentParameters (a chosen
    tool that this process does not have stays chosen, as in a conversation).

    Raises ValidationError with one line saying why not.
    """
    from chat.transcripts.limits import JsonRefused, storable

    raw = value.to_json() if isinstance(value, AgentParameters) else value
    try:
        storable(raw)
    except JsonRefused as exc:
        raise ValidationError(
            "The agent's settings cannot be stored: %(reason)s.",
            code="unstorable",
            params={"reason": exc},
        ) from None
    if not isinstance(raw, Mapping):
        raise ValidationError("The agent's settings must be a JSON object.", code="not_object")
    try:
        return AgentParameters.from_stored(raw).to_json()
    except ValueError as exc:
        raise ValidationError(
            "The agent's settings are invalid: %(reason)s.",
            code="invalid",
            params={"reason": validation_text(exc)},
        ) from None


def validate_parameters(value: Any) -> None:
    stored_parameters(value)


def comparable(parameters: AgentParameters) -> tuple[Any, ...]:
    """Parameters as two configurations compare them: the order tools were chosen in aside."""
    return parameters.model_dump(exclude={"enabled_tools"}), frozenset(parameters.enabled_tools)


@dataclass(frozen=True)
class Configuration:
    """What a version holds and a conversation starts with: the endpoint (a provider profile;
    None, the server's own) and the parameters."""

    profile: ProviderProfile | None
    parameters: AgentParameters

    @classmethod
    def of(cls, conversation: Conversation) -> Configuration:
        """A conversation's settings now; ValueError when its stored parameters are invalid."""
        return cls(conversation.profile, conversation.agent_parameters())


class Visibility(models.TextChoices):
    PRIVATE = "private", "Private: only its owner"
    TEAM = "team", "The team"


class AgentQuerySet(models.QuerySet["Agent"]):
    # Who may do what is `chat.access`'s rule (imported here late: it imports the models).

    def usable_by(self, user: Any) -> AgentQuerySet:
        """The agents `user` may chat with: their own, and the team's."""
        from chat import access

        return access.agents(user, access.AgentAction.USE, self)

    def changeable_by(self, user: Any) -> AgentQuerySet:
        """The agents `user` may make versions of and publish."""
        from chat import access

        return access.agents(user, access.AgentAction.CHANGE, self)


class Agent(models.Model):
    """A named agent: its versions hold the configuration; `published` is the one new
    conversations use."""

    name = models.CharField(
        max_length=NAME_CHARS,
        unique=True,
        validators=[validate_name, validate_text],
        error_messages={"unique": "An agent with this name already exists."},
    )
    slug = models.SlugField(
        max_length=NAME_CHARS,
        unique=True,
        allow_unicode=True,
        help_text="Made from the name when the agent is made; it stays when the name changes.",
    )
    description = models.TextField(
        blank=True, validators=[validate_note], help_text="What it does."
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agents"
    )
    visibility = models.CharField(
        max_length=10, choices=Visibility.choices, default=Visibility.PRIVATE, db_index=True
    )
    # RESTRICT: the published version is deleted only with its agent.
    published = models.ForeignKey(
        "AgentVersion",
        null=True,
        blank=True,
        on_delete=models.RESTRICT,
        related_name="+",
        help_text="The version new conversations use.",
    )
    suite = models.ForeignKey(
        CaseSet,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="agents",
        help_text="The case set its versions are evaluated on.",
    )
    require_suite_pass = models.BooleanField(
        default=False,
        help_text="A new version is published only if it passes at least as many of the suite's "
        "cases as the published one.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = AgentQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            # A version is published by its own agent alone (`publishing` checks the agent).
            models.UniqueConstraint(fields=["published"], name="unique_published_version")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_team(self) -> bool:
        return self.visibility == Visibility.TEAM


class ImmutableVersion(Exception):
    """A saved version changed: a change is a new version."""


class AgentVersion(models.Model):
    """One immutable configuration of an agent: its endpoint and parameters, who made it, when,
    and a note saying what changed."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField(help_text="1, 2, … in the order they were made.")
    profile = models.ForeignKey(
        ProviderProfile,
        null=True,
        blank=True,
        # A version keeps its endpoint: a profile that versions use is not deleted under them.
        on_delete=models.PROTECT,
        related_name="agent_versions",
        help_text="Empty: the endpoint configured in the environment.",
    )
    parameters = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_parameters],
        help_text="Validated AgentParameters snapshot.",
    )
    note = models.TextField(blank=True, validators=[validate_note], help_text="What changed.")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="agent_versions",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "number"], name="unique_agent_version")
        ]

    def __str__(self) -> str:
        return f"{self.agent.name} v{self.number}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Only a new version is saved, with its parameters as `stored_parameters` keeps them."""
        if not self._state.adding:
            raise ImmutableVersion(f"{self} is saved: a change is a new version.")
        self.parameters = stored_parameters(self.parameters)
        super().save(*args, **kwargs)

    @property
    def is_published(self) -> bool:
        return self.agent.published_id == self.pk

    def agent_parameters(self) -> AgentParameters:
        return AgentParameters.from_stored(self.parameters)

    def configuration(self) -> Configuration:
        return Configuration(self.profile, self.agent_parameters())

    def matches(self, conversation: Conversation) -> bool:
        """Whether the conversation's settings are still this version's (its endpoint, and its
        parameters whatever the order of its tools); invalid stored settings match nothing."""
        if conversation.profile_id != self.profile_id:
            return False
        try:
            theirs = conversation.agent_parameters()
        except ValueError:
            return False
        return comparable(theirs) == comparable(self.agent_parameters())


class Publication(models.Model):
    """Who published which version of an agent, and when: the record behind `published`."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="publications")
    version = models.ForeignKey(AgentVersion, on_delete=models.CASCADE, related_name="publications")
    published_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    published_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-published_at", "-id"]

    def __str__(self) -> str:
        return f"{self.version} published"


class AgentChoice(models.Model):
    """The agent a user's new conversations start from; none (or one they may no longer use):
    the built-in Default."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_choice"
    )
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.user}: {self.agent or BUILT_IN_NAME}"
