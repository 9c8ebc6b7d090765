"""Tests of chat.agent.mcp's pure parts: exposed names and what the model reads of a result."""

from __future__ import annotations

import re

from mcp import types

from chat.agent import mcp, mcp_content

OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def test_exposed_names_follow_the_openai_rule_and_stay_stable() -> None:
    assert mcp.exposed_name("docs", "search_docs") == "docs__search_docs"
    odd = mcp.exposed_name("my docs", "search.docs/v2 ✓")
    assert odd == "my_docs__search_docs_v2" and OPENAI_NAME.match(odd)
    long = mcp.exposed_name("a-very-long-server-name", "and_an_even_longer_tool_name_" * 3)
    assert OPENAI_NAME.match(long) and len(long) == 64
    assert long == mcp.exposed_name("a-very-long-server-name", "and_an_even_longer_tool_name_" * 3)
    # Two tools that sanitise alike get different, stable names.
    first = mcp.exposed_name("docs", "a.b")
    second = mcp.exposed_name("docs", "a/b", taken={first})
    assert first == "docs__a_b" and second != first and OPENAI_NAME.match(second)
    assert second == mcp.exposed_name("docs", "a/b", taken={first})


def result(**fields: object) -> types.CallToolResult:
    return types.CallToolResult.model_validate(fields)


def test_the_model_reads_structured_content_as_json_else_the_text() -> None:
    structured = result(
        content=[{"type": "text", "text": '{"n": 1}'}], structuredContent={"n": 1, "é": "ü"}
    )
    assert mcp_content.result_text(structured) == '{"n": 1, "é": "ü"}'
    wrapped = result(content=[{"type": "text", "text": "5"}], structuredContent={"result": 5})
    assert mcp_content.result_text(wrapped) == "5"
    listed = result(content=[{"type": "text", "text": "[1]"}], structuredContent={"result": [1]})
    assert mcp_content.result_text(listed) == '{"result": [1]}'
    texts = result(content=[{"type": "text", "text": "one"}, {"type": "text", "text": "two"}])
    assert mcp_content.result_text(texts) == "one\ntwo"


def test_images_and_resources_are_summarised() -> None:
    mixed = result(
        content=[
            {"type": "text", "text": "Here:"},
            {"type": "image", "data": "aGVsbG8gd29ybGQh", "mimeType": "image/png"},
            {
                "type": "resource",
                "resource": {"uri": "file:///a.txt", "text": "abc", "mimeType": "text/plain"},
            },
        ]
    )
    assert mcp_content.result_text(mixed) == (
        "Here:\n[image: image/png, 12 bytes]\n[resource: file:///a.txt, text/plain, 3 characters]"
    )


def test_an_error_result_gives_the_servers_message() -> None:
    failed = result(content=[{"type": "text", "text": "index rebuilding"}], isError=True)
    assert mcp_content.error_text(failed) == "index rebuilding"
    assert mcp_content.error_text(result(content=[], isError=True)) == "the tool failed"


def test_a_config_names_its_transport() -> None:
    assert mcp.ServerConfig(name="a", url="http://x/mcp").transport == "http"
    assert mcp.ServerConfig(name="b", command="python").transport == "stdio"
