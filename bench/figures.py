"""From the samples of a phase to the report's figures, in milliseconds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.browser import Scenario, ScreenSample
from bench.direct import DirectReply
from bench.stats import check_tokens, percentile, summary, total_checks
from bench.wsdriver import RelayedReply


def ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def frame_bound(reply: RelayedReply, flush_interval: float) -> int:
    """Most text frames coalescing allows for a reply that streamed for this long."""
    return math.ceil(reply.streaming_span / flush_interval) + 2


def violations(replies: Sequence[RelayedReply], flush_interval: float) -> list[dict[str, Any]]:
    """A few replies that streamed in more text frames than coalescing allows."""
    return [
        {
            "text_frames": reply.text_frames,
            "bound": frame_bound(reply, flush_interval),
            "streaming_ms": ms(reply.streaming_span),
            "gaps_ms": [round(ms(gap) or 0.0, 2) for gap in reply.gaps],
        }
        for reply in replies
        if reply.text_frames > frame_bound(reply, flush_interval)
    ][:3]


@dataclass
class LevelSamples:
    """Everything measured at one concurrency level, over all its rounds."""

    level: int
    rounds: int
    tokens: int
    direct: list[DirectReply] = field(default_factory=list)
    relayed: list[RelayedReply] = field(default_factory=list)
    direct_wall: float = 0.0
    relayed_wall: float = 0.0
    latency_first: list[float] = field(default_factory=list)
    latency_last: list[float] = field(default_factory=list)
    memory: dict[str, dict[str, int | None]] = field(default_factory=dict)
    profiles: list[dict[str, Any]] = field(default_factory=list)


def level_figures(samples: LevelSamples, flush_interval: float) -> dict[str, Any]:
    direct, relayed, tokens = samples.direct, samples.relayed, samples.tokens
    direct_wall, relayed_wall = samples.direct_wall, samples.relayed_wall
    direct_ttft = summary(ms(reply.ttft) for reply in direct)
    direct_total = summary(ms(reply.total) for reply in direct)
    relayed_ttft = summary(ms(reply.ttft) for reply in relayed)
    relayed_total = summary(ms(reply.total) for reply in relayed)
    finished = [reply for reply in relayed if reply.completed is not None]
    return {
        "level": samples.level,
        "rounds": samples.rounds,
        "samples": len(relayed),
        "direct": {
            "ttft_ms": direct_ttft,
            "total_ms": direct_total,
            "tokens_per_s": len(direct) * tokens / direct_wall if direct_wall else None,
            "replies_per_s": len(direct) / direct_wall if direct_wall else None,
            "errors": sorted({reply.error for reply in direct if reply.error}),
            "tokens": total_checks(check_tokens(reply.text, tokens) for reply in direct),
        },
        "relayed": {
            "ttft_ms": relayed_ttft,
            "total_ms": relayed_total,
            "frames": summary(reply.frames for reply in finished),
            "text_frames": summary(reply.text_frames for reply in finished),
            "bytes": summary(reply.bytes for reply in finished),
            "tokens_per_s": len(relayed) * tokens / relayed_wall if relayed_wall else None,
            "replies_per_s": len(relayed) / relayed_wall if relayed_wall else None,
            "unfinished": len(relayed) - len(finished),
            "notices": sorted({notice for reply in relayed for notice in reply.notices}),
            "tokens": total_checks(check_tokens(reply.text, tokens) for reply in relayed),
            "final_text": total_checks(check_tokens(reply.final_text, tokens) for reply in relayed),
            "frame_bound_violations": sum(
                1 for reply in finished if reply.text_frames > frame_bound(reply, flush_interval)
            ),
            "frame_bound_examples": violations(finished, flush_interval),
        },
        "overhead_ms": {
            metric: {q: _difference(relayed_figure[q], direct_figure[q]) for q in ("p50", "p99")}
            for metric, relayed_figure, direct_figure in (
                ("ttft", relayed_ttft, direct_ttft),
                ("total", relayed_total, direct_total),
            )
        },
        "ratio": {
            metric: {q: _ratio(relayed_figure[q], direct_figure[q]) for q in ("p50", "p99")}
            for metric, relayed_figure, direct_figure in (
                ("ttft", relayed_ttft, direct_ttft),
                ("total", relayed_total, direct_total),
            )
        },
        "relay_latency_ms": {
            "first_token": summary(ms(value) for value in samples.latency_first),
            "last_token": summary(ms(value) for value in samples.latency_last),
        },
        "memory_kb": samples.memory,
        "profiles": samples.profiles,
    }


def coalescing_figures(
    tokens: int,
    pace_ms: float,
    direct: list[DirectReply],
    relayed: list[RelayedReply],
    flush_interval: float,
) -> dict[str, Any]:
    gaps = [ms(gap) or 0.0 for reply in relayed for gap in reply.gaps]
    direct_gaps = [ms(gap) or 0.0 for reply in direct for gap in reply.gaps]
    return {
        "tokens": tokens,
        "pace_ms": pace_ms,
        "samples": len(relayed),
        "frames": summary(reply.frames for reply in relayed),
        "text_frames": summary(reply.text_frames for reply in relayed),
        "bytes": summary(reply.bytes for reply in relayed),
        "streaming_ms": summary(ms(reply.streaming_span) for reply in relayed),
        "frame_bound": [frame_bound(reply, flush_interval) for reply in relayed],
        "frame_bound_violations": sum(
            1 for reply in relayed if reply.text_frames > frame_bound(reply, flush_interval)
        ),
        "frame_bound_examples": violations(relayed, flush_interval),
        "gap_ms": {
            "p50": percentile(gaps, 50),
            "p95": percentile(gaps, 95),
            "max": max(gaps, default=None),
        },
        "direct_gap_ms": {
            "p50": percentile(direct_gaps, 50),
            "max": max(direct_gaps, default=None),
        },
        "ttft_ms": summary(ms(reply.ttft) for reply in relayed),
        "total_ms": summary(ms(reply.total) for reply in relayed),
        "direct_total_ms": summary(ms(reply.total) for reply in direct),
        "tokens_check": total_checks(check_tokens(reply.text, tokens) for reply in relayed),
    }


def browser_figures(
    scenario: Scenario, direct: list[DirectReply], screen: list[ScreenSample]
) -> dict[str, Any]:
    good = [sample for sample in screen if not sample.error]
    direct_ttft = summary(ms(reply.ttft) for reply in direct)
    direct_total = summary(ms(reply.total) for reply in direct)
    first = summary(sample.first for sample in good)
    done = summary(sample.done for sample in good)
    gaps = [gap for sample in good for gap in sample.gaps]
    return {
        "tokens": scenario.tokens,
        "pace_ms": scenario.pace_ms,
        "tool_rounds": scenario.tools,
        "samples": len(screen),
        "direct_ms": {"ttft": direct_ttft, "total": direct_total},
        "screen_ms": {
            "first": first,
            "first_painted": summary(sample.first_frame for sample in good),
            "done": done,
            "done_painted": summary(sample.done_frame for sample in good),
            "sent": summary(sample.sent for sample in good),
            "first_arrival": summary(sample.first_arrival for sample in good),
            "first_handled": summary(sample.first_handled for sample in good),
        },
        "overhead_ms": {
            "first": _difference(first["p50"], direct_ttft["p50"]),
            "done": _difference(done["p50"], direct_total["p50"]),
            "first_max": _difference(first["max"], direct_ttft["p50"]),
            "done_max": _difference(done["max"], direct_total["p50"]),
        },
        "updates": summary(sample.updates for sample in good),
        "gap_ms": {
            "p50": percentile(gaps, 50),
            "p95": percentile(gaps, 95),
            "max": max(gaps, default=None),
        },
        "tokens_failed": sum(1 for sample in good if not sample.tokens_ok),
        "errors": [sample.error for sample in screen if sample.error],
    }
