"""A password hasher for test processes: Django's PBKDF2 with few iterations.

The default takes about half a second per password, on purpose. This one writes hashes any
server verifies with its own default hasher (the iteration count travels in the hash), so a
user made in a test logs in to a live server in a process of its own.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1
