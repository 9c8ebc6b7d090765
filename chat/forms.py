"""Forms: the agent settings panel validates through AgentParameters, the single source of rules."""

from __future__ import annotations

from typing import Any

from django import forms
from pydantic import ValidationError

from chat import agent
from chat.agent.contracts import MAX_EVENT_LOOPS
from chat.agent.messages import ROLES
from chat.models import Conversation


class SystemPromptForm(forms.Form):
    content = forms.CharField(
        label="System prompt", required=False, widget=forms.Textarea(attrs={"rows": 3})
    )


class PreMessageForm(forms.Form):
    role = forms.ChoiceField(choices=[(role, role) for role in ROLES], initial="user")
    content = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))


SystemPromptFormSet = forms.formset_factory(SystemPromptForm, extra=1, max_num=20)
PreMessageFormSet = forms.formset_factory(PreMessageForm, extra=1, max_num=50)


class AgentSettingsForm(forms.Form):
    model = forms.CharField(
        required=False, max_length=200, help_text="Empty: the server's default model."
    )
    temperature = forms.FloatField(required=False, min_value=0, max_value=2, step_size=None)
    top_p = forms.FloatField(required=False, min_value=0, max_value=1, label="Top p")
    max_tokens = forms.IntegerField(required=False, min_value=1, label="Max tokens")
    max_event_loops = forms.IntegerField(
        min_value=1,
        max_value=MAX_EVENT_LOOPS,
        label="Max event loops",
        help_text="Model turns per run.",
    )
    enabled_tools = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Enabled tools"
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["enabled_tools"].choices = [
            (name, agent.humanize(name)) for name in agent.default_registry.names()
        ]


class AgentSettings:
    """The settings panel: one form and two formsets, validated together as AgentParameters."""

    def __init__(self, conversation: Conversation, data: Any = None) -> None:
        self.conversation = conversation
        current = conversation.agent_parameters()
        self.form = AgentSettingsForm(
            data,
            initial={
                "model": current.model or "",
                "temperature": current.temperature,
                "top_p": current.top_p,
                "max_tokens": current.max_tokens,
                "max_event_loops": current.max_event_loops,
                "enabled_tools": list(current.enabled_tools),
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
        self.parameters: agent.AgentParameters | None = None
        self.non_field_errors: list[str] = []

    def is_valid(self) -> bool:
        valid = [self.form.is_valid(), self.system_prompts.is_valid(), self.pre_messages.is_valid()]
        if not all(valid):
            return False
        data = self.form.cleaned_data
        pre_forms = [f for f in self.pre_messages.forms if (f.cleaned_data or {}).get("content")]
        candidate = {
            "model": data["model"] or None,
            "temperature": data["temperature"],
            "top_p": data["top_p"],
            "max_tokens": data["max_tokens"],
            "max_event_loops": data["max_event_loops"],
            "enabled_tools": data["enabled_tools"],
            "system_prompts": [
                f.cleaned_data["content"]
                for f in self.system_prompts.forms
                if (f.cleaned_data or {}).get("content", "").strip()
            ],
            "pre_messages": [
                {"role": f.cleaned_data["role"], **_message_fields(f.cleaned_data)}
                for f in pre_forms
            ],
        }
        try:
            self.parameters = agent.AgentParameters.model_validate(candidate)
        except ValidationError as exc:
            self._attach(exc, pre_forms)
            return False
        return True

    def _attach(self, exc: ValidationError, pre_forms: list[forms.Form]) -> None:
        for error in exc.errors():
            message = str(error["msg"]).removeprefix("Value error, ")
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

    def save(self) -> None:
        assert self.parameters is not None
        self.conversation.set_agent_parameters(self.parameters)
        self.conversation.save(update_fields=["parameters", "updated_at"])


def _message_fields(data: dict[str, Any]) -> dict[str, Any]:
    if data["role"] == "tool":
        return {"content": data["content"], "tool_call_id": "pre-message"}
    return {"content": data["content"]}


def _index_in(message: str, loc: tuple[Any, ...]) -> int | None:
    if len(loc) > 1 and isinstance(loc[1], int):
        return loc[1]
    if "pre_messages[" in message:
        return int(message.split("pre_messages[", 1)[1].split("]", 1)[0])
    return None
