"""The streaming benchmark: `manage.py bench` (see bench/README.md)."""
