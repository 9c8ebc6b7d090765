from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0018_model_call_storage"),
    ]

    operations = []
