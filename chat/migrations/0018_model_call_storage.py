"""Model calls store their request as what the conversation's previous request lacked, with the
sha256 of its encoding, and the raw stream zlib-compressed. Rows are converted one
conversation at a time, in chunks, so memory stays constant whatever the table's size."""

from __future__ import annotations

import zlib
from typing import Any

import django.db.models.deletion
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from chat.agent.wire import encode_body, payload_sha256
from chat.models.request_store import Stored, delta_text, fold

CHUNK = 200
NEW = ["request_base", "request_delta", "request_sha256", "raw_stream_zlib"]


def _conversations(apps: StateApps, db: str) -> Any:
    """The ids of conversations with model calls, in order, a chunk at a time."""
    run = apps.get_model("chat", "Run")
    last = 0
    while True:
        ids = list(
            run.objects.using(db)
            .filter(conversation_id__gt=last, model_calls__isnull=False)
            .order_by("conversation_id")
            .values_list("conversation_id", flat=True)
            .distinct()[:CHUNK]
        )
        if not ids:
            return
        yield from ids
        last = ids[-1]


def _chunks(apps: StateApps, db: str, conversation: int, *fields: str) -> Any:
    """A conversation's model calls in the order they were made, a chunk at a time."""
    model_call = apps.get_model("chat", "ModelCall")
    last = 0
    while True:
        rows = list(
            model_call.objects.using(db)
            .filter(run__conversation_id=conversation, pk__gt=last)
            .order_by("pk")
            .values_list("pk", *fields)[:CHUNK]
        )
        if not rows:
            return
        yield rows
        last = rows[-1][0]


def _immediate(schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Check the deferred foreign keys now: PostgreSQL refuses to alter a table with pending
    trigger events, and the old columns are dropped in the same transaction."""
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")


def forward(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    model_call = apps.get_model("chat", "ModelCall")
    db = schema_editor.connection.alias
    for conversation in _conversations(apps, db):
        before: tuple[int, Any] | None = None
        for rows in _chunks(apps, db, conversation, "request", "raw_stream"):
            updates = []
            for pk, body, raw in rows:
                payload = encode_body(body)
                text, base = payload.decode(), None
                if before is not None and (change := delta_text(before[1], body, text)):
                    text, base = change, before[0]
                updates.append(
                    model_call(
                        pk=pk,
                        request_base_id=base,
                        request_delta=text,
                        request_sha256=payload_sha256(payload),
                        raw_stream_zlib=zlib.compress(raw.encode()) if raw else b"",
                    )
                )
                before = (pk, body)
            model_call.objects.using(db).bulk_update(updates, NEW)
    _immediate(schema_editor)


def backward(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Whole bodies and plain streams again (a conversation's bodies are rebuilt together)."""
    model_call = apps.get_model("chat", "ModelCall")
    db = schema_editor.connection.alias
    for conversation in _conversations(apps, db):
        stored = [
            Stored(*row)
            for rows in _chunks(
                apps, db, conversation, "request_base", "request_delta", "request_sha256"
            )
            for row in rows
        ]
        bodies = fold(stored, targets={row.pk for row in stored})
        for rows in _chunks(apps, db, conversation, "raw_stream_zlib"):
            updates = [
                model_call(
                    pk=pk,
                    request=bodies[pk],
                    raw_stream=zlib.decompress(data).decode() if data else "",
                )
                for pk, data in rows
            ]
            model_call.objects.using(db).bulk_update(updates, ["request", "raw_stream"])
        model_call.objects.using(db).filter(run__conversation_id=conversation).update(
            request_base=None
        )
    _immediate(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0017_approval_records"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelcall",
            name="raw_pruned_at",
            field=models.DateTimeField(
                blank=True, help_text="When `manage.py prune` dropped the raw stream.", null=True
            ),
        ),
        migrations.AddField(
            model_name="modelcall",
            name="raw_stream_zlib",
            field=models.BinaryField(
                blank=True,
                default=b"",
                help_text=(
                    "The stream as received, zlib-compressed: one 'milliseconds<TAB>line' a line."
                ),
            ),
        ),
        migrations.AddField(
            model_name="modelcall",
            name="request_base",
            field=models.ForeignKey(
                blank=True,
                help_text=(
                    "The conversation's earlier call whose request this one extends; none: whole."
                ),
                null=True,
                on_delete=django.db.models.deletion.RESTRICT,
                related_name="+",
                to="chat.modelcall",
            ),
        ),
        migrations.AddField(
            model_name="modelcall",
            name="request_delta",
            field=models.TextField(
                default="{}",
                help_text="JSON text: the body sent, or what it adds to request_base's.",
            ),
        ),
        migrations.AddField(
            model_name="modelcall",
            name="request_sha256",
            field=models.CharField(
                blank=True, help_text="Of the exact bytes sent (hex).", max_length=64
            ),
        ),
        migrations.RunPython(forward, backward),
        migrations.RemoveField(model_name="modelcall", name="raw_stream"),
        migrations.RemoveField(model_name="modelcall", name="request"),
    ]
