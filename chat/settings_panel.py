"""The settings panel of a conversation: provider, model and sampling, the tools and each one's
policy, system prompts and pre-messages, validated together as AgentParameters (the single
source of rules) and saved together; and the tools its owner always allowed here."""

from __future__ import annotations

from typing import Any

from chat.agent.mcp import SEPARATOR
from chat.agent.tools import humanize
from chat.forms import (
    DEFAULT_EVENT_LOOPS,
    MAX_ROWS,
    AgentSettingsForm,
    ConversationSettings,
    PreMessageFormSet,
    SystemPromptFormSet,
)
from chat.formsets import row_edit
from chat.models import Conversation
from chat.tool_choices import tool_choices
from chat.tool_policies import PolicyForm, ask_again


class AgentSettings(ConversationSettings):
    """The settings panel: a form, two formsets and the tools' policies, validated together as
    AgentParameters."""

    form: AgentSettingsForm

    def __init__(self, conversation: Conversation, data: Any = None, *, user: Any) -> None:
        super().__init__(conversation)
        # Add and Remove post the panel as it stands and get it back with one row more or less;
        # Ask again takes back an "Always allow" at once, and gets the panel back as posted.
        self.rows = row_edit(data, MAX_ROWS)
        data = self.rows.data if self.rows else data
        again = data.get("ask_again") if data is not None and not self.rows else None
        self.asked_again = ask_again(conversation, again) if again else ""
        current = self.current
        self.tool_groups = tool_choices(current.enabled_tools)
        self.form = AgentSettingsForm(
            data,
            user=user,
            profile=conversation.profile,
            tools=self.tool_groups,
            initial={
                "model": current.model or "",
                "temperature": current.temperature,
                "top_p": current.top_p,
                "max_tokens": current.max_tokens,
                # The server default shows as the placeholder, not as a value of this panel.
                "max_event_loops": (
                    None
                    if current.max_event_loops == DEFAULT_EVENT_LOOPS
                    else current.max_event_loops
                ),
                "enabled_tools": list(current.enabled_tools),
                "profile": conversation.profile_id,
            },
            prefix="agent",
        )
        self.system_prompts = SystemPromptFormSet(
            data,
            initial=[{"content": text} for text in current.system_prompts],
            prefix="system",
        )
        self.pre_messages = PreMessageFormSet(
            data,
            initial=[{"role": m.role, "content": m.content} for m in current.pre_messages],
            prefix="pre",
        )
        self.policies = PolicyForm(
            data, groups=self.tool_groups, current=current, conversation=conversation
        )
        if again and again in self.policies.fields:
            self.policies.fields[again].widget.attrs["autofocus"] = True
        # A blank row to type in when there is none; Add makes more.
        self.system_prompts.extra = 0 if current.system_prompts else 1
        self.pre_messages.extra = 0 if current.pre_messages else 1
        if self.rows and self.rows.added is not None:
            rows = self.system_prompts if self.rows.prefix == "system" else self.pre_messages
            first = next(iter(rows.forms[self.rows.added].fields.values()))
            first.widget.attrs["autofocus"] = True

    def is_valid(self) -> bool:
        valid = [
            self.form.is_valid(),
            self.system_prompts.is_valid(),
            self.pre_messages.is_valid(),
            self.policies.is_valid(),
        ]
        if not all(valid):
            return False
        data = self.form.cleaned_data
        pre_forms = [f for f in self.pre_messages.forms if (f.cleaned_data or {}).get("content")]
        loops = data["max_event_loops"]
        candidate = {
            "model": data["model"] or None,
            "temperature": data["temperature"],
            "top_p": data["top_p"],
            "max_tokens": data["max_tokens"],
            "max_event_loops": DEFAULT_EVENT_LOOPS if loops is None else loops,
            "enabled_tools": data["enabled_tools"],
            "tool_policies": self.policies.cleaned_data["tool_policies"],
            "system_prompts": [
                f.cleaned_data["content"]
                for f in self.system_prompts.forms
                if (f.cleaned_data or {}).get("content", "").strip()
            ],
            "pre_messages": [
                {"role": f.cleaned_data["role"], "content": f.cleaned_data["content"]}
                for f in pre_forms
            ],
        }
        return self._validated(candidate, pre_forms)

    @property
    def editing(self) -> bool:
        """An Add, a Remove or an Ask again: the panel comes back as posted, nothing saved."""
        return bool(self.rows or self.asked_again)

    @property
    def always_allowed(self) -> list[tuple[str, str]]:
        """The tools its owner always allowed here: (name, title), an MCP tool's with its
        server ("Write (docs)")."""
        found = []
        for name in self.conversation.always_allowed or []:
            server, _, tool = str(name).rpartition(SEPARATOR)
            found.append((name, f"{humanize(tool)} ({server})" if server else humanize(name)))
        return found
