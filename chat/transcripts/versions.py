"""Versions of a conversation: edit and resend, regenerate, retry, and switching between them.

The active path is every message without a version; it is what the model sees and the page
shows. A new version from message `index` on archives the active messages from `index` as a
`Version` row (the versions that hung off them move with them), and the run writes the new
ones. Switching swaps the active suffix with an archived one at the same index. Every path,
active or not, is a plain list of messages the strict-history passes validate and repair.

Numbers count the versions at one index in the order they were made: the archived versions
hold theirs, and the active path has the one number they leave free.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import transaction

from chat.models import Conversation, Message, Version


class VersionRefused(ValueError):
    """A version cannot be made or shown; the text says why."""


@dataclass(frozen=True)
class Point:
    """Where versions exist on the active path: at message `index`, `number` of `total`."""

    index: int
    number: int
    total: int

    @property
    def previous(self) -> int | None:
        return self.number - 1 if self.number > 1 else None

    @property
    def next(self) -> int | None:
        return self.number + 1 if self.number < self.total else None


def _free_number(numbers: Iterable[int]) -> int:
    taken = set(numbers)
    return next(n for n in range(1, len(taken) + 2) if n not in taken)


def points(conversation: Conversation, start: int = 0, end: int | None = None) -> dict[int, Point]:
    """The version points of the active path, by message index, from `start` up to `end`
    (excluded; None: the end): one query that reads a page's window alone."""
    top = conversation.versions.filter(parent=None, index__gte=start)
    if end is not None:
        top = top.filter(index__lt=end)
    return points_of(top.values_list("index", "number"))


def points_of(top: Iterable[tuple[int, int]]) -> dict[int, Point]:
    """The version points of the active path from its top-level versions' (index, number)."""
    numbers: dict[int, list[int]] = {}
    for index, number in top:
        numbers.setdefault(index, []).append(number)
    return {
        index: Point(index, _free_number(taken), len(taken) + 1) for index, taken in numbers.items()
    }


def start_of(rows: Sequence[Message], index: int, *, edit: bool) -> Message:
    """The active message a new version starts at: a user message (edit, regenerate), or the
    first reply of a turn with no user message (regenerate only). Raises VersionRefused."""
    position = next((p for p, row in enumerate(rows) if row.index == index), None)
    if position is None:
        raise VersionRefused(f"There is no message {index} in this conversation.")
    row = rows[position]
    if row.role == Message.Role.USER:
        return row
    if edit:
        raise VersionRefused(f"Message {index} is not a user message: only those can be edited.")
    before = rows[position - 1].role if position else None
    if row.role == Message.Role.ASSISTANT and before in (None, Message.Role.TOOL):
        return row
    raise VersionRefused(f"Message {index} does not start a reply: regenerate from its question.")


def last_start(rows: Sequence[Message]) -> Message:
    """Where regenerating the last reply starts: the last user message."""
    for row in reversed(rows):
        if row.role == Message.Role.USER:
            return row
    raise VersionRefused("This conversation has no user message to regenerate the reply to.")


def archive_from(conversation: Conversation, index: int) -> Version:
    """Archive the active path from message `index` on as a version (caller holds the lock)."""
    taken = conversation.versions.filter(parent=None, index=index).values_list("number", flat=True)
    version = Version.objects.create(
        conversation=conversation, index=index, number=_free_number(taken)
    )
    conversation.versions.filter(parent=None, index__gt=index).update(parent=version)
    conversation.messages.filter(version=None, index__gte=index).update(version=version)
    return version


@transaction.atomic
def switch(conversation: Conversation, index: int, number: int) -> bool:
    """Make version `number` at message `index` the active one; False if it already is.

    Raises VersionRefused while a run is in progress, or when there is no such version.
    """
    Conversation.objects.select_for_update().filter(pk=conversation.pk).exists()
    if conversation.runs.in_progress().exists():
        raise VersionRefused("A run is in progress: stop it or wait before switching versions.")
    point = points(conversation).get(index)
    if point is None or not 1 <= number <= point.total:
        raise VersionRefused(f"There is no version {number} at message {index}.")
    if number == point.number:
        return False
    target = conversation.versions.get(parent=None, index=index, number=number)
    archive_from(conversation, index)
    target.messages.update(version=None)
    target.children.update(parent=None)
    target.delete()
    conversation.save(update_fields=["updated_at"])
    return True


@dataclass
class Path:
    """One version's whole path: the messages a run on it would send."""

    version: Version | None
    messages: list[Message]

    @property
    def label(self) -> str:
        return "active path" if self.version is None else str(self.version)


def paths(conversation: Conversation) -> list[Path]:
    """The active path, then every archived version's path (two queries)."""
    rows: dict[int | None, list[Message]] = {}
    for row in conversation.messages.order_by("index"):
        rows.setdefault(row.version_id, []).append(row)
    versions = list(conversation.versions.order_by("index", "number", "pk"))
    by_pk = {version.pk: version for version in versions}
    made: dict[int | None, list[Message]] = {None: rows.get(None, [])}

    def path(pk: int | None) -> list[Message]:
        if pk not in made:
            version = by_pk[pk]  # type: ignore[index]
            before = [row for row in path(version.parent_id) if row.index < version.index]
            made[pk] = before + rows.get(pk, [])
        return made[pk]

    return [Path(None, made[None])] + [Path(v, path(v.pk)) for v in versions]
