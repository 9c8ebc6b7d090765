"""Tests of chat.charts: figures per day as SVG, bars stacked series on series, lines with a gap
for a day without a value; a title and a description in words; no inline style; both layouts."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import date, timedelta

from chat.charts import Chart, Series, labelled

SVG = "{http://www.w3.org/2000/svg}"
DAYS = [date(2026, 3, 1) + timedelta(days=n) for n in range(4)]


def drawn(chart: Chart, layout: str = "wide") -> ET.Element:
    html = str(chart.html())
    start = html.index(f'<svg class="chart-svg chart-{layout}"')
    return ET.fromstring(html[start : html.index("</svg>", start) + 6])


def runs_chart() -> Chart:
    series = [Series("chat", "Chats", [3, 0, 1, 2]), Series("eval", "Evaluations", [1, 0, 0, 2])]
    return Chart("runs", "Runs per day", DAYS, series, lambda v: f"{v:g}")


def test_bars_stack_one_series_on_the_other_each_with_its_class_and_title() -> None:
    svg = drawn(runs_chart())
    bars = list(svg.iter(f"{SVG}rect"))
    keys = [r.attrib["class"].removeprefix("chart-bar chart-") for r in bars]
    assert keys == ["chat", "eval", "chat", "chat", "eval"]  # the empty day draws nothing
    first_chat, first_eval = bars[0], bars[1]
    assert float(first_eval.attrib["y"]) + float(first_eval.attrib["height"]) == float(
        first_chat.attrib["y"]
    )  # on top of it
    assert float(first_chat.attrib["height"]) == 3 * float(first_eval.attrib["height"])
    assert [t.text for t in first_chat.iter(f"{SVG}title")] == ["1 Mar 2026: 3 chats"]


def test_the_picture_says_what_it_shows() -> None:
    svg = drawn(runs_chart())
    assert svg.attrib["role"] == "img"
    assert svg.attrib["aria-labelledby"] == "chart-runs-wide-title"
    assert svg.attrib["aria-describedby"] == "chart-runs-wide-desc"
    assert svg.find(f"{SVG}title").text == "Runs per day"  # type: ignore[union-attr]
    assert svg.find(f"{SVG}desc").text == (  # type: ignore[union-attr]
        "Runs per day, 1 Mar 2026 to 4 Mar 2026. Chats: 6 in all; Evaluations: 3 in all. "
        "The table below has each day."
    )
    html = str(runs_chart().html())
    assert "style=" not in html
    assert html.count('<svg class="chart-svg') == 2  # wide and narrow
    assert 'id="chart-runs-narrow-title"' in html


def test_the_scale_is_round_and_reaches_the_highest_stack() -> None:
    assert runs_chart().scale() == [0.0, 1.0, 2.0, 3.0, 4.0]
    big = Chart("t", "Tokens", DAYS, [Series("chat", "Chats", [12_345, 0, 0, 0])], str)
    assert big.scale()[-1] >= 12_345
    assert big.scale() == [0.0, 5000.0, 10000.0, 15000.0]


def test_lines_break_where_a_day_has_no_value_and_mark_lone_points() -> None:
    series = [Series("p50", "Median (p50)", [1.0, None, 2.0, 3.0])]
    chart = Chart("latency", "Run duration", DAYS, series, str, lines=True, whole=False)
    svg = drawn(chart)
    lines = list(svg.iter(f"{SVG}polyline"))
    assert len(lines) == 1  # day 3 to day 4; day 1 alone is a dot
    assert len(lines[0].attrib["points"].split()) == 2
    assert len(list(svg.iter(f"{SVG}circle"))) == 3
    assert "Median (p50): highest 3.0 on 4 Mar 2026" in chart.description()


def test_an_empty_chart_says_so_instead_of_drawing() -> None:
    chart = Chart("runs", "Runs per day", DAYS, [Series("chat", "Chats", [0, 0, 0, 0])], str)
    html = str(chart.html())
    assert '<svg class="chart-svg' not in html
    assert "Nothing in this period." in html
    assert "Chats" in html  # the legend stays


def test_dates_under_the_axis_are_spread_from_first_to_last() -> None:
    assert labelled(3, 7) == [0, 1, 2]
    assert labelled(30, 4) == [0, 10, 19, 29]
    assert labelled(366, 7)[0] == 0 and labelled(366, 7)[-1] == 365
