"""Model output to safe HTML: Markdown through markdown-it, code through Pygments, then the nh3
sanitiser.

Highlighting uses CSS classes only (the CSP forbids inline styles); the colours live in
static/css/code.css, which `python -m chat.rendering > static/css/code.css` writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import nh3
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.token import Token
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
_formatter = HtmlFormatter(nowrap=True)
LIGHT_STYLE, DARK_STYLE = "default", "github-dark"
_ALLOWED_TAGS = {
    "a", "blockquote", "br", "button", "code", "del", "div", "em", "h1", "h2", "h3", "h4", "h5",
    "h6", "hr", "li", "ol", "p", "pre", "span", "strong", "table", "tbody", "td", "th", "thead",
    "tr", "ul",
}  # fmt: skip
_ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "button": {"type", "class", "data-copy-code"},
    "code": {"class"},
    "div": {"class", "tabindex", "role", "aria-label"},
    "pre": {"class", "tabindex"},
    "span": {"class"},
    "td": {"align"},
    "th": {"align"},
}


def _fence(renderer: Any, tokens: Sequence[Token], index: int, options: Any, env: Any) -> str:
    """A fenced code block: its language, a Copy code button, the code highlighted."""
    token = tokens[index]
    name = token.info.strip().split(maxsplit=1)[0] if token.info.strip() else ""
    try:
        lexer = get_lexer_by_name(name) if name else None
    except ClassNotFound:
        lexer = None
    code = highlight(token.content, lexer, _formatter) if lexer else escape(token.content)
    label = escape(lexer.name if lexer else name or "text")
    return (
        '<div class="code-block"><div class="code-head">'
        f'<span class="code-lang">{label}</span>'
        '<button type="button" class="copy-code" data-copy-code>Copy code</button></div>'
        f'<pre class="highlight" tabindex="0"><code>{code}</code></pre></div>\n'
    )


_markdown.add_render_rule("fence", _fence)
# A wide table scrolls in its own box, which keyboard users reach too.
_markdown.add_render_rule(
    "table_open",
    lambda *_: '<div class="table-wrap" tabindex="0" role="region" aria-label="Table"><table>\n',
)
_markdown.add_render_rule("table_close", lambda *_: "</table></div>\n")


def parse(text: str) -> list[Token]:
    """The block tokens of `text`, as `markdown` reads them."""
    return _markdown.parse(text)


def markdown(text: str | None) -> SafeString:
    """Render Markdown and sanitise the result; raw HTML in the source is shown as text."""
    if not text:
        return mark_safe("")
    html = _markdown.render(text)
    clean = nh3.clean(
        html,
        tags=_ALLOWED_TAGS,
        attributes=_ALLOWED_ATTRIBUTES,
        set_tag_attribute_values={"button": {"type": "button"}},
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
    return mark_safe(clean)


def code_css() -> str:
    """The highlighting colours: the light theme, the dark one for a dark page."""
    light = _style_defs(LIGHT_STYLE, ".highlight")
    chosen = _style_defs(DARK_STYLE, ':root[data-theme="dark"] .highlight')
    system = _style_defs(DARK_STYLE, ':root:not([data-theme="light"]) .highlight')
    return (
        "/* Code highlighting, written by `python -m chat.rendering`: do not edit. */\n"
        f"{_only_tokens(light)}\n{_only_tokens(chosen)}\n"
        f"@media (prefers-color-scheme: dark) {{\n{_only_tokens(system)}\n}}\n"
    )


def _style_defs(style: str, selector: str) -> str:
    formatter: Any = HtmlFormatter(style=style)  # its get_style_defs has no annotations
    return str(formatter.get_style_defs(selector))


def _only_tokens(css: str) -> str:
    """Token colours only: the page's own styles set the block's background and spacing."""
    skipped = ("pre {", ".hll {", "{ background", "linenos")
    return "\n".join(line for line in css.splitlines() if not any(s in line for s in skipped))


if __name__ == "__main__":
    print(code_css(), end="")
