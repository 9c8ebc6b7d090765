"""The waterfall's legend: an entry for each colour and mark the run's picture has, drawn with
the bars' own classes, in the inspector's and the admin's picture alike."""

from __future__ import annotations

import re

from chat import waterfall
from chat.waterfall_legend import legend
from tests.test_waterfall import at, model_call, parallel_run, tool_call


def entries(html: str) -> list[str]:
    return re.findall(r"</svg>([^<]+)</li>", html)


def test_the_legend_names_what_the_run_shows_and_nothing_else() -> None:
    run, calls, tools = parallel_run()
    shown = str(waterfall.picture(run, calls, tools))
    assert shown.count('<ul class="waterfall-legend" aria-label="Legend">') == 1
    assert entries(shown) == ["Model call", "First token", "Tool call", "Failed"]


def test_every_entry_is_drawn_with_the_classes_of_the_bars_it_explains() -> None:
    run, calls, tools = parallel_run()
    tools += [
        tool_call(2, 0, "handoff_note", 0.5, 0.2, status="cancelled"),
        tool_call(2, 1, "slow_lookup", 0.5, 0.2, asked_at=at(0.45), decided_at=at(0.5)),
    ]
    rows = waterfall.bars(run, calls, tools)
    html = str(legend(rows))
    assert entries(html) == [
        "Model call",
        "First token",
        "Tool call",
        "Failed",
        "Stopped or still running",
        "Waiting for approval",
    ]
    drawn = str(waterfall.svg(run, calls, tools))
    classes = " ".join(re.findall(r'<rect class="([^"]+)"', html)).split()
    assert set(classes) <= set(" ".join(re.findall(r'<rect class="([^"]+)"', drawn)).split())
    assert 'aria-hidden="true"' in html
    assert "style=" not in html


def test_a_run_with_nothing_timed_has_no_legend() -> None:
    run, _, _ = parallel_run()
    assert str(waterfall.picture(run, [], [])) == ""
    assert str(legend([])) == ""


def test_a_failed_model_call_alone_is_explained_as_failed() -> None:
    run, _, _ = parallel_run()
    failed = model_call(1, 0.4, 0.35)
    failed.error = "HTTP 500: boom"
    assert entries(str(legend(waterfall.bars(run, [failed], [])))) == ["Failed"]
