"""Make sure someone can log in to a fresh install, without a fixed default password."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = (
        "Create a superuser with a generated password if no superuser exists, and print the "
        "password once. Does nothing when one exists."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        existing = User.objects.filter(is_superuser=True).order_by("pk").first()
        if existing is not None:
            self.stdout.write(
                f"Log in as {existing.get_username()!r} (password set earlier; "
                f"reset it with: python manage.py changepassword {existing.get_username()})."
            )
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(options["username"], password=password)
        self.stdout.write(
            self.style.SUCCESS(
                f"Created user {options['username']!r} with password: {password}\n"
                "It is shown only this once; change it with "
                f"python manage.py changepassword {options['username']}."
            )
        )
