"""An index on when runs started: the Usage page reads a period's runs."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0020_conversation_pins_archive_seen"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["started_at"], name="chat_run_started_at"),
        ),
    ]
