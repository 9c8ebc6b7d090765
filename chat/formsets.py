"""Rows added to or removed from a posted formset: a panel grows and shrinks in place, rendered
by the server, with Django's management form kept right (no row numbers kept in the browser)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from django.http import QueryDict


@dataclass(frozen=True)
class RowEdit:
    """A posted Add or Remove, applied: the data to show instead, and where focus goes next."""

    data: QueryDict
    prefix: str
    added: int | None = None
    """The index of the new row; None after a removal (or at the limit)."""

    @property
    def focus_add(self) -> str:
        """The prefix whose Add button takes the focus (after a removal), else ""."""
        return self.prefix if self.added is None else ""


def row_edit(data: QueryDict | None, limits: Mapping[str, int]) -> RowEdit | None:
    """The Add or Remove this POST asked for (`add=<prefix>`, `remove=<prefix>-<index>`),
    applied to its data; None when it asked for neither (a Save)."""
    if data is None:
        return None
    added = data.get("add", "")
    if added in limits:
        return with_row_added(data, added, limit=limits[added])
    prefix, _, number = data.get("remove", "").rpartition("-")
    if prefix in limits and number.isdigit():
        return with_row_removed(data, prefix, int(number))
    return None


def _count(data: QueryDict, name: str) -> int | None:
    try:
        return int(data.get(name, ""))
    except ValueError:
        return None


def with_row_added(data: QueryDict, prefix: str, *, limit: int) -> RowEdit:
    """The data as if the page had one more empty row (none past `limit`)."""
    copy = data.copy()
    rows = _count(data, f"{prefix}-TOTAL_FORMS")
    if rows is None or not 0 <= rows < limit:
        return RowEdit(copy, prefix)  # a tampered count is the formset's to report
    copy[f"{prefix}-TOTAL_FORMS"] = str(rows + 1)
    return RowEdit(copy, prefix, added=rows)


def with_row_removed(data: QueryDict, prefix: str, index: int) -> RowEdit:
    """The data as if row `index` had never been on the page: the rows after it move up."""
    rows = _count(data, f"{prefix}-TOTAL_FORMS")
    initial = _count(data, f"{prefix}-INITIAL_FORMS")
    if rows is None or initial is None or not 0 <= index < rows:
        return RowEdit(data.copy(), prefix)
    field = re.compile(rf"^{re.escape(prefix)}-(\d+)-(.+)$")
    copy = QueryDict(mutable=True)
    for key, values in data.lists():
        match = field.match(key)
        if match:
            row = int(match.group(1))
            if row == index:
                continue
            if row > index:
                key = f"{prefix}-{row - 1}-{match.group(2)}"
        copy.setlist(key, values)
    copy[f"{prefix}-TOTAL_FORMS"] = str(rows - 1)
    copy[f"{prefix}-INITIAL_FORMS"] = str(initial - 1 if index < initial else initial)
    return RowEdit(copy, prefix)
