"""Files sent with a user message. On SQLite the column is added in place: Django would rebuild
the messages table for a field with a default, which the search index's view and triggers
(0019) forbid."""

from typing import Any

from django.db import migrations, models

HELP = (
    "Files sent with a user message: name, content type, size, sha256, kind (image, text, "
    "pdf), pages. The bytes are in storage under attachments/ by sha256."
)


def _field() -> models.JSONField:
    field = models.JSONField(blank=True, default=list, help_text=HELP)
    field.set_attributes_from_name("attachments")
    return field


def forward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(
            "ALTER TABLE chat_message ADD COLUMN attachments text NOT NULL DEFAULT '[]' "
            "CHECK (JSON_VALID(attachments))"
        )
    else:
        schema_editor.add_field(apps.get_model("chat", "Message"), _field())


def backward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("ALTER TABLE chat_message DROP COLUMN attachments")
    else:
        schema_editor.remove_field(apps.get_model("chat", "Message"), _field())


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0021_run_started_at_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forward, backward)],
            state_operations=[
                migrations.AddField(
                    model_name="message",
                    name="attachments",
                    field=models.JSONField(blank=True, default=list, help_text=HELP),
                ),
            ],
        ),
    ]
