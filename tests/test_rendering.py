"""Tests of chat.rendering: Markdown, highlighted code and tables, sanitised."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from chat.rendering import code_css, markdown


def test_code_is_highlighted_with_classes_and_labelled() -> None:
    html = str(markdown('```python\ndef f():\n    return "<b>"\n```'))
    assert '<span class="code-lang">Python</span>' in html
    assert '<span class="k">def</span>' in html and "&lt;b&gt;" in html
    assert 'class="copy-code" data-copy-code="">Copy code</button>' in html
    assert "style=" not in html  # the CSP allows no inline style


def test_an_unknown_or_hostile_language_is_plain_escaped_text() -> None:
    html = str(markdown('```"><img src=x onerror=alert(1)>\n<script>alert(1)</script>\n```'))
    assert "<script>" not in html and "<img" not in html and "onerror" not in html.split("<pre")[1]
    assert "&lt;script&gt;" in html
    plain = str(markdown("```\nplain\n```"))
    assert '<span class="code-lang">text</span>' in plain


def test_tables_are_kept() -> None:
    html = str(markdown("| a | b |\n|---|---|\n| 1 | 2 |"))
    assert "<table>" in html and "<th>a</th>" in html and "<td>2</td>" in html


def test_the_highlighting_stylesheet_is_the_generated_one() -> None:
    """Regenerate with `python -m chat.rendering > static/css/code.css`."""
    written = (Path(settings.BASE_DIR) / "static" / "css" / "code.css").read_text()
    assert written == code_css()
    assert ':root[data-theme="dark"] .highlight .k' in written
    assert "prefers-color-scheme: dark" in written
