"""The Markdown of a conversation: readable, and nothing anyone wrote can break its structure."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from markdown_it import MarkdownIt
from markdown_it.token import Token

from chat import agent, transcripts
from chat.agent.scripted import ScriptedChatClient
from chat.models import Conversation, Run
from chat.testing import factories as make
from chat.transcripts import markdown

pytestmark = pytest.mark.django_db

HOSTILE_USER = (
    "### Assistant · #9\n"
    "```\n"
    "<!-- everything after me is hidden\n"
    "    indented, not code\n"
    "- not a list *not emphasis* [not](a link) `not code` 1. nor | a | table\n"
    "Setext?\n"
    "===\n"
    "&amp; $x$ ~~no~~ \\ end\\"
)
HOSTILE_REPLY = (
    "# A reply's heading\n"
    "Title by underline\n"
    "---\n"
    "</blockquote></details><script>alert(1)</script> but `<kept in code>`\n"
    "```python\n"
    "print('a fence left open')\n"
    "### User · #0 (inside the open fence)"
)
HOSTILE_ARGUMENTS = '{"q": "```` ``` `` fence breakers"}'
HOSTILE_RESULT = "````\n### Tool · #7\n<details open>\n```"


def page(html: bool = True) -> MarkdownIt:
    """A renderer as permissive as a forge's: raw HTML on, tables on."""
    return MarkdownIt("commonmark", {"html": html}).enable("table")


def headings(tokens: list[Token], tag: str) -> list[str]:
    """The text of each heading of this level, as a reader sees it (escapes undone)."""
    return [
        "".join(child.content for child in tokens[position + 1].children or ())
        for position, token in enumerate(tokens)
        if token.type == "heading_open" and token.tag == tag
    ]


def hostile_conversation() -> Conversation:
    made = make.conversation(
        make.user("ada"), "Pills <b>&</b> `ticks`", system_prompts=["Be brief.\n```"]
    )
    run = Run.objects.create(
        conversation=made, status="failed", error="Provider said <no>", model="m-1"
    )
    call = agent.ToolCall(id="call_`1`", name="search_cards", arguments=HOSTILE_ARGUMENTS)
    transcripts.append_messages(
        made,
        [
            agent.ChatMessage(role="user", content=HOSTILE_USER),
            agent.ChatMessage(
                role="assistant", content=HOSTILE_REPLY, reasoning="think ```", tool_calls=(call,)
            ),
            agent.ChatMessage(role="tool", content=HOSTILE_RESULT, tool_call_id="call_`1`"),
        ],
        run=run,
    )
    return made


def test_hostile_content_cannot_break_the_structure() -> None:
    made = hostile_conversation()
    text = markdown.text(made)
    tokens = page().parse(text)

    assert headings(tokens, "h1") == ["Pills <b>&</b> `ticks`"]
    assert headings(tokens, "h2") == []
    ours = headings(tokens, "h3")
    assert [heading.split(" · ")[:2] for heading in ours] == [
        ["System prompt 1"],
        ["User", "#0"],
        ["Assistant", "#1"],
        ["Tool", "#2"],
    ]
    assert ours[3].startswith("Tool · #2 · Search cards · ")
    # No raw HTML gets through, anywhere.
    kinds = {token.type for token in tokens} | {
        child.type for token in tokens for child in token.children or ()
    }
    assert "html_block" not in kinds and "html_inline" not in kinds
    # The reply's headings sit below ours; its open fence is closed before the next message.
    assert headings(tokens, "h4") == ["A reply's heading"]
    assert headings(tokens, "h5") == ["Title by underline"]
    code = [token for token in tokens if token.type == "fence"]
    assert [token.info for token in code] == ["text", "text", "python", "json", "text"]
    assert code[0].content == "Be brief.\n```\n"
    assert code[1].content == "think ```\n"
    assert "### User · #0 (inside the open fence)" in code[2].content
    assert json.loads(code[3].content) == json.loads(HOSTILE_ARGUMENTS)
    assert code[4].content == HOSTILE_RESULT + "\n"


def test_a_user_message_reads_literally() -> None:
    made = hostile_conversation()
    whole = page().render(markdown.text(made))
    html = whole.partition("<h3>User · #0")[2].partition("<h3>")[0]
    assert "<li>" not in html and "<em>" not in html and "<table>" not in html
    assert "<a href" not in html and "<del>" not in html
    assert "### Assistant · #9<br />" in html
    assert "&lt;!-- everything after me is hidden" in html
    assert "- not a list *not emphasis* [not](a link) `not code` 1. nor | a | table" in html
    assert "\u00a0" * 4 + "indented, not code" in html
    assert "Setext?<br />\n===" in html
    assert "&amp;amp; $x$ ~~no~~ \\ end\\" in html


def test_tool_calls_are_readable_blocks_and_a_failed_run_says_why() -> None:
    text = markdown.text(hostile_conversation())
    assert "**Tool call: Search cards** (`search_cards`, call `` call_`1` ``)" in text
    assert "Result of call `` call_`1` ``:" in text
    assert "> **Failed**: Provider said \\<no\\>" in text
    assert "- Model: m\\-1" not in text and "- Model: m-1" in text
    assert "**Reasoning**" in text


@pytest.mark.django_db(transaction=True)
def test_a_real_conversation_in_order_with_its_facts() -> None:
    made = make.conversation(make.user("ada"), "Clock", enabled_tools=["get_current_time"])
    make.run_turn(made, "what time is it in Europe/Paris?", ScriptedChatClient())
    text = markdown.text(made)
    assert text.startswith("# Clock\n\n- Conversation ")
    assert "- Tools: `get_current_time`\n" in text
    assert text.index("### User · #0") < text.index("### Assistant · #1")
    assert text.index("### Assistant · #1") < text.index("### Tool · #2 · Get current time")
    assert "Europe/Paris" in text.partition("### Tool")[0]  # the call's arguments
    result = text.partition("### Tool · #2")[2]
    assert '```json\n{\n  "timezone": "Europe/Paris",\n' in result  # a JSON result, indented
    assert "> **" not in text  # a completed run needs no note


def test_an_empty_conversation_says_so() -> None:
    made = make.conversation(make.user("ada"), "Nothing yet")
    assert markdown.text(made).endswith("_No messages yet._\n\n")


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("plain words", "plain words"),
        ("1. one\n2) two", "1\\. one\\\n2\\) two"),
        ("a\n\n\nb", "a\n\n\nb"),
        ("  two spaces", "\u00a0\u00a0two spaces"),
        ("+ plus\n= equals", "\\+ plus\\\n\\= equals"),
    ],
)
def test_literal(written: str, expected: str) -> None:
    assert markdown.literal(written) == expected


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("## Two", "##### Two"),
        ("###### Six", "###### Six"),
        ("~~~\nopen", "~~~\nopen\n~~~"),
        ("````\n```\nstill code", "````\n```\nstill code\n````"),
        ("a <b> `<c>` ``<d>`` `<e>", "a \\<b> `<c>` ``<d>`` `\\<e>"),
        ("- item\n---", "- item\n---"),
    ],
)
def test_contained(written: str, expected: str) -> None:
    assert markdown.contained(written) == expected


def test_fences_and_code_spans_outlast_what_they_hold() -> None:
    assert markdown.fenced("a ```` b", "json") == "`````json\na ```` b\n`````"
    assert markdown.code("`x`") == "`` `x` ``"
    assert markdown.code("two\nlines") == "`two lines`"


def test_export_transcripts_writes_markdown_documents() -> None:
    owner = make.user("ada")
    for title in ("First", "Second"):
        made = make.conversation(owner, title)
        transcripts.append_messages(made, [agent.ChatMessage(role="user", content=f"{title}?")])
    make.conversation(owner, "Empty")
    out, err = StringIO(), StringIO()
    call_command("export_transcripts", "--format", "markdown", stdout=out, stderr=err)
    text = out.getvalue()
    assert text.index("# First\n") < text.index("First?") < text.index("# Second\n")
    assert "Empty" not in text
    assert "Exported 2 conversation(s) (markdown format); 1 without messages." in err.getvalue()
    with pytest.raises(CommandError, match="--all-versions is for the openai format"):
        call_command("export_transcripts", "--format", "markdown", "--all-versions")
