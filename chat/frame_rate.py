"""How often a run's text frames go out: often enough to read smoothly, rarely enough that a
process streaming many runs keeps up with every model (chat.fragments paces by it)."""

from __future__ import annotations

FLUSH_INTERVAL = 0.04
BUSY_FLUSH_INTERVAL = 0.08
"""The frame interval once BUSY_STREAMS runs of this process stream at once (see frame_interval)."""
QUIET_STREAMS = 10
BUSY_STREAMS = 100


def frame_interval(base: float, streams: int) -> float:
    """The time between two text frames of a run while `streams` runs of the process stream.

    A frame costs the process about the same however many words it carries, and so does every
    read of a provider stream (reads are paced to frames). With many runs streaming, the loop
    is the bottleneck: `base` up to QUIET_STREAMS, then longer frames, up to
    BUSY_FLUSH_INTERVAL at BUSY_STREAMS, so that every stream keeps up with its model. 80 ms
    is still smooth to read, and under the 100 ms a reader sees as a stutter.
    """
    if streams <= QUIET_STREAMS or base >= BUSY_FLUSH_INTERVAL:
        return base
    share = min(1.0, (streams - QUIET_STREAMS) / (BUSY_STREAMS - QUIET_STREAMS))
    return base + (BUSY_FLUSH_INTERVAL - base) * share
