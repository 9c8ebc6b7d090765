"""Model calls written into a new conversation (a fork's copies, an import's rows)."""

from __future__ import annotations

from chat.models import ModelCall
from chat.models.request_store import store

from .rows import create_as_recorded


def create_chained(calls: list[ModelCall]) -> list[ModelCall]:
    """Bulk-create a new conversation's calls, in the order they were made, each request
    stored as what the one before it lacks (`request_store`); the bases are linked once the
    rows have keys. Each call's request (and its sha256) must be at hand."""
    links: list[tuple[ModelCall, ModelCall]] = []
    before: ModelCall | None = None
    for call in calls:
        bases = [] if before is None else [before]
        if (base := store(call, call.request, call.request_sha256, bases=bases)) is not None:
            links.append((call, base))
        before = call
    created = create_as_recorded(ModelCall, calls, "started_at")
    for call, base in links:
        call.request_base = base
    ModelCall.objects.bulk_update([call for call, _ in links], ["request_base"], batch_size=500)
    return created
