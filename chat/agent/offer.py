"""What one request may offer the model, and what the model reads when it calls outside it."""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Sequence

MAX_TOOLS = 128
"""The most tools one request may carry (OpenAI's documented limit)."""
MAX_NAMED = 20
"""A call to a tool not offered names the offered ones up to this many; past it, the closest."""


def too_many_tools(
    sources: Sequence[str],
    *,
    lead: str = "This run offers",
    advice: str = "Turn some off in the settings.",
) -> str | None:
    """Why one request cannot carry these tools (one source each, "" for a built-in one),
    counted by source; None when it can."""
    if len(sources) <= MAX_TOOLS:
        return None
    counts = Counter(sources)
    by_source = ", ".join(
        f"{source or 'built-in'} ({counts[source]})"
        for source in sorted(counts, key=lambda source: (not source, source))
    )
    return (
        f"{lead} {len(sources)} tools; the most a request may carry is {MAX_TOOLS}. "
        f"By source: {by_source}. {advice}"
    )


def not_available(name: str, offered: Sequence[str]) -> str:
    """What the model reads of a call to a tool this request did not offer: the offered tools,
    or past MAX_NAMED of them, their count and the three names closest to the one it called."""
    if len(offered) <= MAX_NAMED:
        return f"tool {name!r} is not available (offered: {', '.join(offered) or 'none'})"
    closest = ", ".join(difflib.get_close_matches(name, offered, n=3, cutoff=0))
    return f"tool {name!r} is not available ({len(offered)} tools offered; closest: {closest})"
