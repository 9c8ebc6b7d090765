"""Why a run did not start."""

from __future__ import annotations


class RunRefused(Exception):
    """The run was not started; nothing was written. The text says why, for the user."""
