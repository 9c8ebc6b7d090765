"""Test support shipped with the app (like `django.test`): servers, fakes, factories, browsers."""
