"""Pins, archive and what its owner has seen: fields of the daily list (pin on top, archive out of
it, news until opened)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0019_search_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="archived_at",
            field=models.DateTimeField(
                blank=True,
                help_text="Archived by its owner: out of their list and the default search.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="conversation",
            name="pinned_at",
            field=models.DateTimeField(
                blank=True,
                help_text="Pinned by its owner: on top of their list, latest pin first.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="conversation",
            name="seen_at",
            field=models.DateTimeField(
                blank=True,
                help_text="When its owner last opened it: a run that ends later is news to them.",
                null=True,
            ),
        ),
    ]
