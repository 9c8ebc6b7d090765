"""Tests of chat.startup's garbage collector settings for a server process."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from chat.startup import GC_THRESHOLD, freeze_start_up_objects


@pytest.fixture
def collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_start_up_objects_are_frozen_and_young_ones_collected_less_often(
    collector: None,
) -> None:
    freeze_start_up_objects()
    assert gc.get_freeze_count() > 10_000  # Django, the URLconf and the hot templates
    assert gc.get_threshold() == GC_THRESHOLD
    assert GC_THRESHOLD[0] > 700  # Python's default: a collection every few tokens
