"""The waterfall of a run: geometry, the first-token tick, escaping, the empty run, the wait for
a person's approval."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from chat import waterfall
from chat.models import ModelCall, Run, RunLease, ToolCall

T0 = datetime(2025, 3, 1, 10, 30, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def model_call(step: int, ends: float, took: float, first: float | None = None) -> ModelCall:
    """A model call as the recorder writes it: the row (its `started_at`) at the call's end."""
    return ModelCall(
        step=step,
        started_at=at(ends),
        duration=took,
        time_to_first_token=first,
        prompt_tokens=10 * step,
        completion_tokens=step,
        total_tokens=11 * step,
    )


def tool_call(
    step: int, position: int, name: str, starts: float, took: float, **fields: Any
) -> ToolCall:
    return ToolCall(
        step=step,
        position=position,
        name=name,
        status=fields.pop("status", "completed"),
        started_at=at(starts),
        finished_at=at(starts + took),
        duration=took,
        **fields,
    )


def parallel_run() -> tuple[Run, list[ModelCall], list[ToolCall]]:
    """Step 1 asks for two tools at once (the second one fails), step 2 answers."""
    run = Run(pk=3, started_at=T0, duration=1.42)
    calls = [model_call(1, 0.4, 0.35, first=0.1), model_call(2, 1.4, 0.25, first=0.05)]
    tools = [
        tool_call(1, 0, "slow_lookup", 0.4, 0.7),
        tool_call(1, 1, "get_current_time", 0.4, 0.1),
        tool_call(1, 2, "search_cards", 0.4, 0.01, status="failed", failure="invalid_arguments"),
    ]
    return run, calls, tools


def rects(svg: str) -> list[ET.Element]:
    return list(ET.fromstring(svg).iter(f"{SVG}rect"))


def span(rect: ET.Element) -> tuple[float, float]:
    left = float(rect.attrib["x"])
    return left, left + float(rect.attrib["width"])


def test_parallel_calls_overlap_in_time_on_separate_lanes() -> None:
    run, calls, tools = parallel_run()
    svg = str(waterfall.svg(run, calls, tools))

    model_one, slow, clock, search, model_two = rects(svg)
    assert "wf-model" in model_one.attrib["class"] and "wf-model" in model_two.attrib["class"]
    assert len({slow.attrib["y"], clock.attrib["y"], search.attrib["y"]}) == 3  # one lane each
    (slow_from, slow_to), (clock_from, clock_to) = span(slow), span(clock)
    assert slow_from == clock_from and clock_to < slow_to  # together, one ends first
    assert span(model_one)[1] <= slow_from + 0.5  # the tools start as the model call ends
    assert span(model_two)[0] >= slow_to - 0.5  # the answer waits for the slowest tool
    assert float(model_one.attrib["y"]) < float(slow.attrib["y"]) < float(model_two.attrib["y"])
    assert "wf-failed" in search.attrib["class"] and "wf-failed" not in slow.attrib["class"]


def test_the_first_token_tick_sits_where_the_first_token_came() -> None:
    run, calls, _ = parallel_run()
    svg = str(waterfall.svg(run, calls[:1], []))
    (bar,) = rects(svg)
    (tick,) = [
        line
        for line in ET.fromstring(svg).iter(f"{SVG}line")
        if line.attrib["class"] == "wf-first-token"
    ]
    left, right = span(bar)
    # 0.1 s into a call of 0.35 s.
    assert float(tick.attrib["x1"]) == pytest.approx(left + (right - left) * 0.1 / 0.35, abs=0.2)
    assert float(tick.attrib["y1"]) < float(bar.attrib["y"])


def test_it_says_what_it_shows() -> None:
    run, calls, tools = parallel_run()
    root = ET.fromstring(str(waterfall.svg(run, calls, tools)))
    summary = "Run of 1.42 s: 2 model calls, 3 tool calls (1 failed)"
    assert root.attrib["role"] == "img" and root.attrib["aria-label"] == summary
    assert root.find(f"{SVG}title").text == f"Waterfall of run 3: {summary}"  # type: ignore[union-attr]
    labels = [text.text for text in root.iter(f"{SVG}text")]
    assert "step 1 · 10→1 tok" in labels and "step 2 · 20→2 tok" in labels
    assert "Slow lookup" in labels and "700 ms" in labels
    assert {"0 ms", "500 ms", "1 s"} <= set(labels)
    titles = [title.text or "" for title in root.iter(f"{SVG}title")]
    assert any("Search cards (search_cards): 0.01 s, invalid arguments" in t for t in titles)


def test_names_from_the_model_are_escaped_and_nothing_is_styled_inline() -> None:
    run, calls, _ = parallel_run()
    hostile = tool_call(1, 0, '<script>alert(1)</script>"', 0.4, 0.1, error="<b>boom</b>")
    svg = str(waterfall.svg(run, calls, [hostile]))

    assert "<script" not in svg and "<b>" not in svg
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
    root = ET.fromstring(svg)  # well-formed: the payload stayed text
    assert not [e for e in root.iter() if e.tag.endswith("script")]
    assert not [e for e in root.iter() if "style" in e.attrib or e.tag.endswith("style")]


def test_an_empty_run_draws_nothing() -> None:
    run = Run(pk=1, started_at=T0)
    assert waterfall.svg(run, [], []) == ""
    untimed = ToolCall(step=1, name="get_current_time")
    assert waterfall.svg(run, [], [untimed]) == ""


def test_a_call_still_running_is_drawn_from_its_start() -> None:
    run = Run(pk=1, started_at=T0)
    running = ToolCall(step=1, name="slow_lookup", status="in_progress", started_at=at(0.2))
    (bar,) = waterfall.bars(run, [], [running])
    assert (bar.start, bar.end) == (pytest.approx(200), pytest.approx(200))
    (rect,) = rects(str(waterfall.svg(run, [], [running])))
    assert float(rect.attrib["width"]) == waterfall.MIN_BAR
    assert "wf-in_progress" in rect.attrib["class"]


@pytest.mark.parametrize(
    ("span_ms", "expected"),
    [
        (1420, [0, 500, 1000]),
        (100, [0, 50, 100]),
        (7, [0, 2, 4, 6]),
    ],
)
def test_ticks_are_round(span_ms: float, expected: list[float]) -> None:
    assert waterfall.ticks(span_ms) == expected


@pytest.mark.parametrize(
    ("ms", "text"), [(1502.4, "1.50 s"), (20.6468, "21 ms"), (0.026775, "0.027 ms"), (0, "0 ms")]
)
def test_durations_are_as_precise_as_they_are_worth(ms: float, text: str) -> None:
    assert waterfall.took(ms) == text


def test_the_narrow_layout_puts_each_label_above_its_bar_across_the_whole_width() -> None:
    run, calls, tools = parallel_run()
    both = str(waterfall.picture(run, calls, tools))
    assert both.count('<svg class="waterfall ') == 2  # and the legend's samples
    assert 'class="waterfall waterfall-narrow"' in both

    root = ET.fromstring(str(waterfall.svg(run, calls, tools, layout=waterfall.NARROW)))
    assert root.attrib["width"] == str(waterfall.NARROW.width)
    labels = [text for text in root.iter(f"{SVG}text") if "wf-label" in text.attrib["class"]]
    assert len(labels) == len(rects(str(waterfall.svg(run, calls, tools)))) == 5
    for label, bar in zip(labels, rects(ET.tostring(root, encoding="unicode")), strict=True):
        assert float(label.attrib["y"]) < float(bar.attrib["y"])
    slow = rects(ET.tostring(root, encoding="unicode"))[1]
    axis = waterfall.NARROW.width - 2 * waterfall.PAD  # no label column: the axis is all of it
    assert float(slow.attrib["width"]) == pytest.approx(axis * 700 / 1420, abs=0.2)
    assert "".join(labels[1].itertext()) == "Slow lookup · 700 ms"


# A run that waited for a person: the wait is a bar of its own.


def waited_run(
    *, decided: bool = True
) -> tuple[Run, list[ModelCall], list[ToolCall], list[RunLease]]:
    """Step 1 asks for a note and the time; the note waits 3 min for a person, then both run;
    step 2 answers. The process let the run go while it waited and took it again after."""
    run = Run(pk=4, started_at=T0, duration=181.0)
    calls = [model_call(1, 0.4, 0.35, first=0.1), model_call(2, 181.0, 0.3)]
    note = tool_call(
        1,
        0,
        "handoff_note",
        180.5,
        0.2,
        policy="ask",
        approval="approved" if decided else "waiting",
        asked_at=at(0.45),
        decided_at=at(180.45) if decided else None,
        decided_by_name="ada",
    )
    clock = tool_call(1, 1, "get_current_time", 180.5, 0.01, policy="run")
    leases = [
        RunLease(worker="vm:1:a", acquired_at=T0, ended_at=at(0.5), outcome="waiting"),
        RunLease(worker="vm:1:a", acquired_at=at(180.46), ended_at=at(181), outcome="finished"),
    ]
    return run, calls, [note, clock], leases


def test_the_wait_for_approval_is_its_own_bar_between_the_question_and_the_decision() -> None:
    run, calls, tools, leases = waited_run()
    svg = str(waterfall.svg(run, calls, tools, leases))

    model_one, wait, note, _, model_two = rects(svg)
    assert wait.attrib["class"] == "wf-bar wf-wait wf-decided"
    title = wait.find(f"{SVG}title")
    assert title is not None and title.text == (
        "Waited 3 min for approval: Handoff note approved by ada at 1 Mar 10:33 after 3 min"
    )
    (wait_from, wait_to), (note_from, _) = span(wait), span(note)
    assert span(model_one)[1] <= wait_from + waterfall.MIN_BAR and wait_to <= note_from + 0.5
    assert wait_to - wait_from > 0.95 * (span(model_two)[1] - span(model_one)[0])
    labels = ["".join(t.itertext()) for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert "waiting for approval" in labels and "3 min" in labels
    assert "wf-gap" not in svg  # the process let it go to wait: no resumption to draw
    label = ET.fromstring(svg).attrib["aria-label"]
    assert label == "Run of 181.00 s: 2 model calls, 2 tool calls, waited 3 min for approval"


def test_a_run_still_waiting_draws_its_wait_up_to_now() -> None:
    run, calls, tools, leases = waited_run(decided=False)
    run.started_at = timezone.now() - timedelta(minutes=10)
    for call in tools:
        call.asked_at = run.started_at
    svg = str(waterfall.svg(run, calls[:1], tools[:1], leases[:1]))

    wait = next(r for r in rects(svg) if "wf-wait" in r.attrib["class"])
    assert wait.attrib["class"] == "wf-bar wf-wait wf-waiting"
    title = wait.find(f"{SVG}title")
    assert title is not None and title.text is not None
    assert title.text.startswith("Waiting for approval for 10 min so far: Handoff note waiting")


def test_the_narrow_layout_says_the_wait_above_its_bar() -> None:
    run, calls, tools, leases = waited_run()
    root = ET.fromstring(str(waterfall.svg(run, calls, tools, leases, layout=waterfall.NARROW)))
    labels = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    assert "waiting for approval · 3 min" in labels
