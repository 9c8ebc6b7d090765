"""Runs: one agent loop per user message, executed as its own task, persisted as it goes.

- `providers`: which endpoint and model a conversation uses, and the client for it.
- `scheduling`: runs that have shown nothing yet go first (StartFirst).
- `lifecycle`: start, execute, cancel.
- `tasks`: the long tasks of this process (runs and evaluations): registry, heartbeat, control
  group, dead-process check, recovery, wind-up.
- `control`: a run's Stop and catch-up requests, from a socket in any process.
- `recorder`: run events into rows.
- `liveness`: a run whose process died, interrupted and its history repaired.
- `titles`: the model's title for a conversation after its first reply, in the background.
"""

from .control import request_cancel, request_catch_up
from .exceptions import RunRefused
from .lifecycle import (
    RunHandle,
    cancel_run,
    check_message,
    default_parameters,
    execute_run,
    start_run,
)
from .liveness import INTERRUPTED, interrupt, recover_interrupted_runs, wind_up_all
from .providers import (
    Endpoint,
    build_client,
    check_images,
    conversation_endpoint,
    endpoint,
    images_refused,
)
from .scheduling import START_FIRST, StartFirst

__all__ = [
    "INTERRUPTED",
    "START_FIRST",
    "Endpoint",
    "RunHandle",
    "RunRefused",
    "StartFirst",
    "build_client",
    "cancel_run",
    "check_images",
    "check_message",
    "conversation_endpoint",
    "default_parameters",
    "endpoint",
    "execute_run",
    "images_refused",
    "interrupt",
    "recover_interrupted_runs",
    "request_cancel",
    "request_catch_up",
    "start_run",
    "wind_up_all",
]
