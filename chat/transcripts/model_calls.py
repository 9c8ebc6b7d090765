"""Model calls written into a new conversation (a fork's copies, an import's rows)."""

from __future__ import annotations

from django.db.models import OuterRef, Subquery

from chat.models import ModelCall
from chat.models.request_store import store

from .rows import create_as_recorded


def create_chained(calls: list[ModelCall]) -> list[ModelCall]:
    """Bulk-create a new conversation's calls, in the order they were made, each request
    stored as what the one before it lacks (`request_store`). Each call's request (and its
    sha256) must be at hand.

    The rows get their keys in list order, so each delta's base is the conversation's call
    just before it: one UPDATE links them all once the rows exist.
    """
    links: list[tuple[ModelCall, ModelCall]] = []
    before: ModelCall | None = None
    for call in calls:
        bases = [] if before is None else [before]
        if (base := store(call, call.request, call.request_sha256, bases=bases)) is not None:
            links.append((call, base))
        before = call
    created = create_as_recorded(ModelCall, calls, "started_at")
    if links:
        conversation = links[0][0].run.conversation_id
        just_before = (
            ModelCall.objects.filter(run__conversation_id=conversation, pk__lt=OuterRef("pk"))
            .order_by("-pk")
            .values("pk")[:1]
        )
        ModelCall.objects.filter(pk__in=[call.pk for call, _ in links]).update(
            request_base=Subquery(just_before)
        )
        for call, base in links:
            call.request_base = base
    return created
