"""Each tool's policy in a conversation's settings: run without asking, ask first or never run,
chosen beside the tool with its default marked. Only a choice that differs from the tool's
default is stored, so a tool whose annotations change later follows its new default.

A conversation's own settings may only tighten the agent version it started from: a looser
choice is refused here, and a run's start tightens them again (`chat.runs.approvals.for_run`).
The tools its owner always allowed here are listed, each to be asked about again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django import forms
from django.db import transaction

from chat.agent import AgentParameters
from chat.agent.approvals import POLICIES, POLICY_LABELS, Policy, looser
from chat.agent.tools import humanize
from chat.models import AgentVersion, Conversation
from chat.runs.approvals import default_policies
from chat.tool_choices import ToolGroup

STRICTER = {"ask": "asks first", "never": "never runs it"}
"""What an agent version does with a tool, said when a conversation would loosen it."""
NAME_CHARS = 64
"""A tool's name at most (AgentParameters' rule): a longer posted one is cut, never stored."""


def version_name(version: AgentVersion) -> str:
    """NAME@N, as `manage.py agents` and `find_version` read it."""
    return f"{version.agent.name}@{version.number}"


def policy_choices(default: Policy) -> list[tuple[str, str]]:
    """The three policies from the loosest, the tool's default marked."""
    return [
        (p, f"{POLICY_LABELS[p]} (default)" if p == default else POLICY_LABELS[p]) for p in POLICIES
    ]


class PolicyForm(forms.Form):
    """One select per tool the settings list (each tool of a server too, whether chosen one by
    one or with the whole server), preselected with the stored choice or the tool's default.

    A tool left out of the POST keeps its stored choice; a stored choice for a tool not listed
    here (a module not loaded, a server gone) is kept as it is.
    """

    def __init__(
        self,
        data: Any,
        *,
        groups: Sequence[ToolGroup],
        current: AgentParameters,
        conversation: Conversation,
    ) -> None:
        super().__init__(data, prefix="policy")
        names = [c.name for g in groups for c in g.choices if c.selectable and not c.whole]
        self.stored: dict[str, Policy] = dict(current.tool_policies)
        self.version = conversation.agent_version
        agents = _policies_of(self.version) if self.version is not None else None
        self.defaults = default_policies({*names, *(agents or {})})
        self.floor: dict[str, Policy] = (
            {} if agents is None else {n: agents.get(n, self.defaults[n]) for n in names}
        )
        for name in dict.fromkeys(names):
            default = self.defaults[name]
            self.fields[name] = forms.ChoiceField(
                required=False,
                label=f"Policy for {humanize(name)}",
                choices=policy_choices(default),
                initial=self.stored.get(name, default),
            )

    @property
    def floor_note(self) -> str:
        """Said above the tools of a conversation started from an agent version."""
        if self.version is None:
            return ""
        return (
            f"Started from the agent {version_name(self.version)}: a tool's policy here may be "
            "stricter than the agent's, not looser."
        )

    def too_loose(self, name: str) -> str:
        assert self.version is not None
        return (
            f"{humanize(name)}: the agent {version_name(self.version)} "
            f"{STRICTER[self.floor[name]]}; a conversation may only tighten that."
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        chosen = {name: p for name, p in self.stored.items() if name not in self.fields}
        for name in self.fields:
            default = self.defaults[name]
            policy: Policy = data.get(name) or self.stored.get(name, default)
            if name in self.floor and looser(policy, self.floor[name]):
                self.add_error(name, self.too_loose(name))
            if policy != default:
                chosen[name] = policy
        data["tool_policies"] = chosen
        return data


def _policies_of(version: AgentVersion) -> dict[str, Policy]:
    """The version's own choices; none when its stored settings no longer validate (a run from
    it is refused then, and the page still renders)."""
    try:
        return dict(version.agent_parameters().tool_policies)
    except ValueError:
        return {}


def ask_again(conversation: Conversation, name: str) -> str:
    """`name` is no longer always allowed in `conversation`: from the next message, its policy
    applies again. The line that says so."""
    name = name[:NAME_CHARS]
    with transaction.atomic():
        locked = Conversation.objects.select_for_update().get(pk=conversation.pk)
        allowed = [tool for tool in locked.always_allowed or [] if tool != name]
        found = len(allowed) != len(locked.always_allowed or [])
        if found:
            locked.always_allowed = allowed
            locked.save(update_fields=["always_allowed"])
    conversation.always_allowed = allowed
    if not found:
        return f"{humanize(name)} is not always allowed here: nothing changed."
    return (
        f"{humanize(name)} is no longer always allowed here: from the next message, it follows "
        "its policy."
    )
