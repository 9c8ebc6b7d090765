"""The settings' policy select beside each tool."""

from __future__ import annotations

from django import forms, template
from django.forms import BoundField

register = template.Library()


@register.filter
def policy_field(form: forms.Form, name: str) -> BoundField | None:
    """`panel.policies|policy_field:choice.name`: that tool's select, or None when the tool has
    none (a whole server: each of its tools has its own)."""
    return form[name] if name in form.fields else None
