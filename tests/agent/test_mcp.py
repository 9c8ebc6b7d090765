"""Tests of chat.agent.mcp's pure parts: exposed names and configurations."""

from __future__ import annotations

import re

from chat.agent import mcp

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


def test_a_config_names_its_transport() -> None:
    assert mcp.ServerConfig(name="a", url="http://x/mcp").transport == "http"
    assert mcp.ServerConfig(name="b", command="python").transport == "stdio"
