"""Lone surrogates become U+FFFD in the annotations, cases and evaluation results stored before
the bounded gate refused them.

A JSON escape such as "\\ud800" names half of a UTF-16 pair, no character: SQLite kept it, and
from then on no page could encode the row (the tool call's details, the case set, the admin,
`cases list` and `cases export` failed). PostgreSQL never stored one, so there this finds
nothing to change.
"""

import json
import re

from django.db import migrations

LONE_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
FIELDS = {
    "Annotation": {"expected": "json", "note": "text"},
    "Case": {
        "title": "text",
        "note": "text",
        "messages": "json",
        "tools": "json",
        "parameters": "json",
        "expected": "json",
        "fixtures": "json",
    },
    "EvalResult": {"expected": "json", "got": "json"},
}
"""The fields a person or a file could fill, by model, and how each is stored."""


def repaired_text(text):
    return LONE_SURROGATE.sub(REPLACEMENT, text)


def repaired_json(value):
    """The value with each lone surrogate of its strings and keys replaced. Through its JSON
    text (where a surrogate can only stand inside a string): no recursion of our own, however
    deep the value."""
    text = json.dumps(value, ensure_ascii=False)
    fixed = repaired_text(text)
    return value if fixed == text else json.loads(fixed)


def repair_lone_surrogates(apps, schema_editor):
    for name, fields in FIELDS.items():
        model = apps.get_model("chat", name)
        rows = model.objects.only("pk", *fields).order_by("pk")
        for row in rows.iterator(chunk_size=200):
            changed = {}
            for field, kind in fields.items():
                value = getattr(row, field)
                if value is None:
                    continue
                fixed = repaired_text(value) if kind == "text" else repaired_json(value)
                if fixed != value:
                    changed[field] = fixed
            if changed:
                model.objects.filter(pk=row.pk).update(**changed)


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0010_evals"),
    ]

    operations = [
        migrations.RunPython(repair_lone_surrogates, migrations.RunPython.noop, elidable=True),
    ]
