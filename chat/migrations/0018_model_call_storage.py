from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0017_approval_records"),
    ]

    operations = []
