"""The forms of the changes page: a conversation's settings saved as a new version of its agent,
or as a new agent.

They read what was typed and nothing more: the rules (names, the bounded gate on a note or a
description, who may) are `versions`' own, so a refusal reads the same here as in a command.
"""

from __future__ import annotations

from typing import Any

from django import forms

from chat.models import Visibility
from chat.models.agents import NAME_CHARS
from chat.transcripts.limits import NOTE_CHARS


class _Form(forms.Form):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)

    def error_line(self) -> str:
        """Every error, as the one line a message shows: "Name: This field is required." """
        lines = []
        for name, errors in self.errors.items():
            label = self.fields[name].label if name in self.fields else ""
            lines += [f"{label}: {error}" if label else str(error) for error in errors]
        return " ".join(lines)


class NewVersionForm(_Form):
    prefix = "version"

    note = forms.CharField(
        required=False,
        label="What changed",
        help_text="Optional: a line for whoever reads the versions.",
        # The length is the gate's to refuse, as everywhere a note is made; the attribute only
        # stops the browser from taking more.
        widget=forms.Textarea(attrs={"rows": 2, "maxlength": NOTE_CHARS}),
    )
    publish = forms.BooleanField(
        required=False,
        label="Publish it now",
        help_text="New conversations start from it (once it passes the agent's suite, when it "
        "has one). Left unticked, it is a draft to try first.",
    )


class NewAgentForm(_Form):
    prefix = "agent"

    name = forms.CharField(max_length=NAME_CHARS, label="Name", strip=True)
    description = forms.CharField(
        required=False,
        label="Description",
        help_text="Optional: what it does, shown where people choose an agent.",
        widget=forms.Textarea(attrs={"rows": 2, "maxlength": NOTE_CHARS}),
    )
    visibility = forms.ChoiceField(
        choices=Visibility.choices,
        initial=Visibility.PRIVATE,
        label="Who can chat with it",
        widget=forms.RadioSelect,
    )
