"""What differs between two agent versions, or between a version and a conversation's settings
now, as a value to read: prompts side by side, tools added and removed, parameters and tool
policies changed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from difflib import SequenceMatcher
from itertools import zip_longest
from typing import Literal

from chat.agent.approvals import Policy
from chat.agent.contracts import AgentParameters
from chat.agent.messages import ChatMessage
from chat.models import AgentVersion, Configuration, ProviderProfile
from chat.runs import endpoint

from .policies import policy_changes

Kind = Literal["same", "changed", "removed", "added"]

SERVER_ENDPOINT = "Server default"
"""The endpoint configured in the environment, named as the settings' provider list names it."""
PROVIDER_DEFAULT = "provider default"
PARAMETERS = {
    "temperature": "Temperature",
    "top_p": "Top p",
    "max_tokens": "Max tokens",
    "max_event_loops": "Max event loops",
}
"""The parameters compared one by one, and their labels (the settings' own)."""


@dataclass(frozen=True)
class Line:
    """One row side by side: the line on each side (None: nothing there), and how they differ."""

    before: str | None
    after: str | None
    kind: Kind


@dataclass(frozen=True)
class TextChange:
    """A system prompt or a pre-message at the same place in both; None where one has none."""

    label: str
    before: str | None
    after: str | None
    before_role: str = ""
    after_role: str = ""

    @property
    def changed(self) -> bool:
        return (self.before, self.before_role) != (self.after, self.after_role)

    @property
    def kind(self) -> Kind:
        if self.before is None:
            return "added"
        if self.after is None:
            return "removed"
        return "changed" if self.changed else "same"

    def lines(self) -> tuple[Line, ...]:
        """The two texts line by line: equal lines side by side, a replaced block paired row by
        row, a removed line with nothing after it, an added one with nothing before it."""
        old = (self.before or "").splitlines()
        new = (self.after or "").splitlines()
        rows: list[Line] = []
        matcher = SequenceMatcher(None, old, new, autojunk=False)
        for tag, start, end, new_start, new_end in matcher.get_opcodes():
            if tag == "equal":
                rows.extend(Line(text, text, "same") for text in old[start:end])
                continue
            pairs = zip_longest(old[start:end], new[new_start:new_end])
            rows.extend(Line(left, right, _line_kind(left, right)) for left, right in pairs)
        return tuple(rows)


def _line_kind(left: str | None, right: str | None) -> Kind:
    if left is None:
        return "added"
    return "removed" if right is None else "changed"


@dataclass(frozen=True)
class ValueChange:
    """A setting that changed: the endpoint, the model, a parameter, a tool's policy (labelled
    with the tool); each side as text."""

    label: str
    before: str
    after: str


@dataclass(frozen=True)
class Difference:
    """Everything that differs from `before` to `after`. Prompts and pre-messages are listed
    at every place (side by side, changed or not); settings only where they changed."""

    system_prompts: tuple[TextChange, ...]
    pre_messages: tuple[TextChange, ...]
    tools_added: tuple[str, ...]
    tools_removed: tuple[str, ...]
    tools_kept: tuple[str, ...]
    settings: tuple[ValueChange, ...]
    policies: tuple[ValueChange, ...] = ()
    """Tools whose policy changed: "Handoff note: ask first → run without asking"."""

    @property
    def empty(self) -> bool:
        texts = (*self.system_prompts, *self.pre_messages)
        changed = any(text.changed for text in texts)
        tools = self.tools_added or self.tools_removed
        return not (changed or tools or self.settings or self.policies)

    def summary(self) -> list[str]:
        """One line per change, for a terminal or a note: nothing when nothing differs."""
        changes = (*self.settings, *self.policies)
        lines = [f"{change.label}: {change.before} → {change.after}" for change in changes]
        texts = (*self.system_prompts, *self.pre_messages)
        lines += [f"{text.label}: {text.kind}" for text in texts if text.changed]
        if self.tools_added:
            lines.append(f"Tools added: {', '.join(self.tools_added)}")
        if self.tools_removed:
            lines.append(f"Tools removed: {', '.join(self.tools_removed)}")
        return lines


def difference(
    before: AgentVersion | Configuration,
    after: AgentVersion | Configuration,
    *,
    defaults: Mapping[str, Policy] | None = None,
) -> Difference:
    """What changed from `before` to `after` (versions, or settings such as
    `Configuration.of(conversation)`); `defaults`, the tools' default policies when the caller
    knows them already (a page of many versions asks once)."""
    old, new = _configuration(before), _configuration(after)
    was, now = old.parameters, new.parameters
    return Difference(
        system_prompts=tuple(
            TextChange(f"System prompt {number}", *pair)
            for number, pair in enumerate(zip_longest(was.system_prompts, now.system_prompts), 1)
        ),
        pre_messages=tuple(
            _pre_message(number, *pair)
            for number, pair in enumerate(zip_longest(was.pre_messages, now.pre_messages), 1)
        ),
        tools_added=tuple(name for name in now.enabled_tools if name not in was.enabled_tools),
        tools_removed=tuple(name for name in was.enabled_tools if name not in now.enabled_tools),
        tools_kept=tuple(name for name in now.enabled_tools if name in was.enabled_tools),
        settings=tuple(_settings(old, new)),
        policies=tuple(ValueChange(*change) for change in policy_changes(was, now, defaults)),
    )


def _configuration(side: AgentVersion | Configuration) -> Configuration:
    return side.configuration() if isinstance(side, AgentVersion) else side


def _pre_message(number: int, before: ChatMessage | None, after: ChatMessage | None) -> TextChange:
    roles = [message.role if message is not None else "" for message in (before, after)]
    shown = " → ".join(dict.fromkeys(role for role in roles if role))
    return TextChange(
        f"Pre-message {number} ({shown})",
        None if before is None else before.content or "",
        None if after is None else after.content or "",
        *roles,
    )


def _settings(old: Configuration, new: Configuration) -> list[ValueChange]:
    pairs = [
        ("Endpoint", _endpoint_text(old.profile), _endpoint_text(new.profile)),
        ("Model", _model_text(old), _model_text(new)),
        *(
            (label, _value_text(old.parameters, name), _value_text(new.parameters, name))
            for name, label in PARAMETERS.items()
        ),
    ]
    return [ValueChange(label, was, now) for label, was, now in pairs if was != now]


def _endpoint_text(profile: ProviderProfile | None) -> str:
    return SERVER_ENDPOINT if profile is None else profile.name


def _model_text(configuration: Configuration) -> str:
    """The model the settings name, else the one their endpoint uses here, said as such."""
    if configuration.parameters.model:
        return configuration.parameters.model
    return f"{endpoint(configuration.profile).label}, the endpoint's"


def _value_text(parameters: AgentParameters, name: str) -> str:
    value = getattr(parameters, name)
    return PROVIDER_DEFAULT if value is None else str(value)
