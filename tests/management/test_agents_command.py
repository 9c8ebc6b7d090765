"""Tests of manage.py agents: create, version, list, show, diff, publish, export and import, as
the user --user names, with one clear line for each refusal and nothing stored."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command

from chat.agents import choose_default
from chat.models import Agent, AgentVersion, Conversation, McpServer, ProviderProfile, Publication
from chat.testing import factories as make

pytestmark = pytest.mark.django_db

PROMPT = "You answer for the support team.\nBe brief.\nCite the docs."


def agents(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("agents", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def as_json(*args: str) -> Any:
    return json.loads(agents(*args, "--json")[0])


def refused(*args: str) -> str:
    """The one line a refused command says."""
    with pytest.raises(CommandError) as caught:
        agents(*args)
    said = str(caught.value)
    assert "\n" not in said and "Traceback" not in said, said
    return said


def settings_of(owner: User, **parameters: Any) -> Conversation:
    return make.conversation(owner, "settings", **parameters)


def changed(made: Conversation, **changes: Any) -> Conversation:
    made.set_agent_parameters(made.agent_parameters().changed(**changes))
    made.save()
    return made


@pytest.fixture
def cli() -> User:
    return make.user("cli")


@pytest.fixture
def support(cli: User) -> Conversation:
    """cli's conversation behind the agent Support: v1 published, v2 a draft."""
    made = settings_of(cli, system_prompts=[PROMPT], enabled_tools=["get_current_time"])
    agents("create", "Support", "--from-conversation", str(made.pk), "--team")
    changed(
        made,
        system_prompts=[PROMPT.replace("Be brief.", "Be brief and kind.")],
        enabled_tools=["handoff_note"],
        temperature=0.2,
    )
    agents("version", "Support", "--from-conversation", str(made.pk), "--note", "Kinder.")
    return made


# Making -----------------------------------------------------------------------------------


def test_create_makes_version_one_published_from_a_conversations_settings(cli: User) -> None:
    made = settings_of(cli, system_prompts=[PROMPT], enabled_tools=["get_current_time"])

    out, _ = agents(
        "create", "Support", "--from-conversation", str(made.pk), "--description", "Answers."
    )

    assert out.strip() == "made Support (slug support): v1, published"
    agent = Agent.objects.get()
    assert (agent.owner, agent.visibility, agent.description) == (cli, "private", "Answers.")
    assert agent.published is not None and agent.published.number == 1
    assert agent.published.agent_parameters().system_prompts == (PROMPT,)
    made.refresh_from_db()
    assert made.agent_version == agent.published


def test_create_and_version_print_the_agent_as_json(cli: User) -> None:
    made = settings_of(cli, enabled_tools=["get_current_time"])

    created = as_json("create", "Support", "--from-conversation", str(made.pk), "--team")
    changed(made, temperature=0.5)
    draft = as_json("version", "Support", "--from-conversation", str(made.pk), "--note", "Warmer.")
    changed(made, temperature=0.7)
    published = as_json("version", "Support", "--from-conversation", str(made.pk), "--publish")

    assert {key: created[key] for key in ("name", "slug", "visibility", "owner", "published")} == {
        "name": "Support",
        "slug": "support",
        "visibility": "team",
        "owner": "cli",
        "published": 1,
    }
    assert created["version"]["number"] == 1 and created["version"]["published"] is True
    assert (draft["published"], draft["versions"]) == (1, 2)
    assert draft["version"] | {"created_at": ""} == {
        "number": 2,
        "published": False,
        "note": "Warmer.",
        "author": "cli",
        "created_at": "",
        "endpoint": None,
        "model": "Scripted model (offline)",
        "parameters": {"enabled_tools": ["get_current_time"], "temperature": 0.5},
        "tools": ["get_current_time"],
        "unavailable_tools": [],
    }
    assert (published["published"], published["version"]["number"]) == (3, 3)
    assert Publication.objects.filter(version__number=3, published_by__username="cli").exists()


def test_version_text_says_draft_or_published(support: Conversation) -> None:
    changed(support, max_tokens=300)
    out, _ = agents("version", "Support", "--from-conversation", str(support.pk), "--publish")
    assert out.strip() == "made Support v3: published"
    changed(support, max_tokens=400)
    out, _ = agents("version", "Support", "--from-conversation", str(support.pk))
    assert out.strip() == "made Support v4: a draft (agents publish NAME@N)"


# Reading ----------------------------------------------------------------------------------


def test_list_shows_the_agents_the_user_may_use(support: Conversation) -> None:
    bob = make.user("bob")
    agents("create", "Bobs own", "--from-conversation", str(settings_of(bob).pk), "--user", "bob")

    out, _ = agents("list")
    listed = as_json("list", "--user", "bob")

    lines = out.splitlines()
    assert lines[0].split() == [
        "NAME",
        "PUBLISHED",
        "VERSIONS",
        "VISIBILITY",
        "OWNER",
        "DESCRIPTION",
    ]
    assert lines[1].split() == ["Support", "v1", "2", "team", "cli"]
    assert len(lines) == 2  # Bob's private agent is his alone
    assert [(row["name"], row["published"], row["versions"]) for row in listed] == [
        ("Bobs own", 1, 1),
        ("Support", 1, 2),
    ]
    assert set(listed[0]) == {
        "name", "slug", "description", "owner", "visibility", "published", "versions", "default"
    }  # fmt: skip


def test_list_marks_the_users_default_agent(support: Conversation) -> None:
    bob = make.user("bob")
    choose_default(user=bob, agent=Agent.objects.get())

    out, _ = agents("list", "--user", "bob")

    assert out.splitlines()[1].startswith("Support (your default)  v1")
    assert [row["default"] for row in as_json("list", "--user", "bob")] == [True]
    assert [row["default"] for row in as_json("list")] == [False]


def test_list_without_agents_says_how_to_make_one() -> None:
    out, _ = agents("list")
    assert "No agents but the built-in Default" in out and "agents create NAME" in out
    assert as_json("list") == []


def test_show_prints_versions_and_a_versions_settings(support: Conversation) -> None:
    out, _ = agents("show", "Support")

    assert out.splitlines()[0] == "Support (slug support) · The team · owner cli"
    assert "  v2  draft      cli" in out and "Kinder." in out
    assert "  v1  published  cli" in out
    assert "Support v1 (published):" in out
    assert "Tools            get_current_time" in out
    assert "      Be brief." in out

    out, _ = agents("show", "Support@2")
    assert "Support v2 (draft):" in out and "Temperature      0.2" in out
    assert "Tools            handoff_note" in out


def test_show_json_has_the_history_and_the_shown_version(support: Conversation) -> None:
    shown = as_json("show", "Support@2")

    assert [row["number"] for row in shown["history"]] == [2, 1]
    assert [row["published"] for row in shown["history"]] == [False, True]
    assert shown["history"][0]["note"] == "Kinder."
    assert shown["version"]["number"] == 2
    assert shown["version"]["parameters"]["temperature"] == 0.2


def test_show_of_the_built_in_default(cli: User) -> None:
    out, _ = agents("show", "Default")
    shown = as_json("show", "default")

    assert out.startswith("Default: the built-in agent.")
    assert shown["built_in"] is True and shown["version"]["endpoint"] is None
    assert "get_current_time" in shown["version"]["tools"]


def test_diff_prints_settings_tools_and_prompt_lines(support: Conversation) -> None:
    out, _ = agents("diff", "Support@1", "Support@2")

    assert out.splitlines() == [
        "Support v1 → Support v2",
        "Temperature: provider default → 0.2",
        "Tools added: handoff_note",
        "Tools removed: get_current_time",
        "System prompt 1 (changed):",
        "    You answer for the support team.",
        "  - Be brief.",
        "  + Be brief and kind.",
        "    Cite the docs.",
    ]


def test_diff_json_and_no_difference(support: Conversation) -> None:
    found = as_json("diff", "Support@1", "Support")

    assert found == {
        "before": "Support v1",
        "after": "Support v1",
        "same": True,
        "settings": [],
        "policies": [],
        "tools_added": [],
        "tools_removed": [],
        "texts": [],
    }
    out, _ = agents("diff", "Support@2", "Support@2")
    assert out.splitlines() == ["Support v2 → Support v2", "No differences."]
    found = as_json("diff", "Support@2", "Default")
    assert found["after"] == "Default" and found["texts"][0]["kind"] == "removed"


def test_a_long_prompt_shows_only_the_lines_around_a_change(cli: User) -> None:
    lines = [f"Rule {number}." for number in range(1, 21)]
    made = settings_of(cli, system_prompts=["\n".join(lines)])
    agents("create", "Rules", "--from-conversation", str(made.pk))
    lines[9] = "Rule ten, rewritten."
    changed(made, system_prompts=["\n".join(lines)])
    agents("version", "Rules", "--from-conversation", str(made.pk))

    out, _ = agents("diff", "Rules@1", "Rules@2")

    assert out.splitlines()[1:] == [
        "System prompt 1 (changed):",
        "  …",
        "    Rule 8.",
        "    Rule 9.",
        "  - Rule 10.",
        "  + Rule ten, rewritten.",
        "    Rule 11.",
        "    Rule 12.",
        "  …",
    ]


# Publishing and who may -------------------------------------------------------------------


def test_publish_makes_a_version_the_published_one(support: Conversation) -> None:
    out, _ = agents("publish", "Support@2")
    assert out.strip() == "published Support v2 (was Support v1)"
    assert Agent.objects.get().published.number == 2  # type: ignore[union-attr]

    out, _ = agents("publish", "Support@2")
    assert out.strip() == "published Support v2 (it already was)"
    assert Publication.objects.count() == 2

    shown = as_json("publish", "Support@1")
    assert shown["published"] == 1 and shown["version"]["number"] == 1


def test_a_teammate_may_use_a_team_agent_but_not_change_it(support: Conversation) -> None:
    bob = make.user("bob")
    mine = settings_of(bob, temperature=1.0)

    assert "Support v1 (published)" in agents("show", "Support", "--user", "bob")[0]
    said = refused("publish", "Support@2", "--user", "bob")
    assert said.startswith("Only this agent's owner")
    said = refused("version", "Support", "--from-conversation", str(mine.pk), "--user", "bob")
    assert said.startswith("Only this agent's owner")
    assert Agent.objects.get().published.number == 1  # type: ignore[union-attr]
    assert AgentVersion.objects.count() == 2

    bob.user_permissions.add(Permission.objects.get(codename="change_agent"))
    agents("publish", "Support@2", "--user", "bob")
    assert Agent.objects.get().published.number == 2  # type: ignore[union-attr]


def test_a_private_agent_is_its_owners_alone(cli: User) -> None:
    agents("create", "Mine", "--from-conversation", str(settings_of(cli).pk))
    make.user("bob")

    for args in (["show", "Mine"], ["publish", "Mine@1"], ["export", "Mine"]):
        assert refused(*args, "--user", "bob") == "No agent named 'Mine' that you may use."
    assert as_json("list", "--user", "bob") == []


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["show", "Nobody"], "No agent named 'Nobody' that you may use."),
        (["show", "Support@9"], "Support has no version 9 (it has 1 to 2)."),
        (["show", "Support@x"], "'Support@x': write NAME, or NAME@N for its version N."),
        (["diff", "Support@1", "Support@7"], "Support has no version 7 (it has 1 to 2)."),
        (["publish", "Support"], "'Support': write NAME@N, the version to publish."),
        (["publish", "Default@1"], "The built-in Default agent has no numbered versions."),
        (["export", "Support@1"], "'Support@1': give the agent's name, without @N."),
        (["export", "Default"], "Default is the built-in agent"),
        (["show", "Support", "--user", "ghost"], "No user named 'ghost'."),
        (["create", "Other", "--from-conversation", "999"], "No conversation 999."),
        (["version", "Support", "--from-conversation", "999"], "No conversation 999."),
        (["create", "Support", "--from-conversation", "{conversation}"], "already exists"),
        (["create", "Default", "--from-conversation", "{conversation}"], "is the built-in agent"),
        (["create", "A@1", "--from-conversation", "{conversation}"], "cannot hold “@”"),
        (["version", "Support", "--from-conversation", "{conversation}"], "nothing changed"),
        (["version", "Support", "--from-conversation", "{bobs}"], "not shared with the team"),
        (["create", "Bobs", "--from-conversation", "{bobs}"], "not shared with the team"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_each_refusal_is_one_line_and_stores_nothing(
    support: Conversation, args: list[str], said: str
) -> None:
    bobs = settings_of(make.user("bob"), temperature=1.5)
    given = [arg.format(conversation=support.pk, bobs=bobs.pk) for arg in args]

    assert said in refused(*given)
    assert (Agent.objects.count(), AgentVersion.objects.count()) == (1, 2)
    assert Publication.objects.count() == 1


# Export and import ------------------------------------------------------------------------


def test_export_then_import_under_another_name_is_the_same_agent(
    support: Conversation, tmp_path: Path
) -> None:
    make.user("bob")
    path = tmp_path / "support.json"
    _, err = agents("export", "Support", "--output", str(path))
    assert err.strip() == f"exported Support (2 versions) to {path}"
    written = json.loads(path.read_text())
    assert (written["format"], written["version"], written["published"]) == ("agentlab.agent", 1, 1)

    out, err = agents("import", str(path), "--name", "Support copy", "--user", "bob")

    assert out.strip() == "imported Support copy (2 versions): Support copy v1 published"
    assert err == ""
    copy = Agent.objects.get(name="Support copy")
    assert (copy.owner.username, copy.visibility, copy.slug) == ("bob", "team", "support-copy")
    assert as_json("diff", "Support@1", "Support copy@1")["same"] is True
    assert as_json("diff", "Support@2", "Support copy@2")["same"] is True
    again = json.loads(agents("export", "Support copy")[0])
    for exported in (written, again):
        for version in exported["versions"]:
            del version["author"], version["created_at"]
    assert again == {**written, "name": "Support copy"}


def test_import_from_stdin_as_json(support: Conversation, monkeypatch: pytest.MonkeyPatch) -> None:
    text = agents("export", "Support")[0]
    Agent.objects.all().delete()  # published versions go with their agent
    monkeypatch.setattr("sys.stdin", _Stdin(text.encode()))

    shown = as_json("import", "-")

    assert (shown["name"], shown["published"], shown["versions"]) == ("Support", 1, 2)
    assert shown["version"]["tools"] == ["get_current_time"]


class _Stdin:
    def __init__(self, data: bytes) -> None:
        self.buffer = _Buffer(data)


class _Buffer:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, size: int = -1) -> bytes:
        return self.data


def test_an_mcp_server_missing_here_is_one_line_and_its_tools_stay_unavailable(
    cli: User, tmp_path: Path
) -> None:
    McpServer.objects.create(name="wiki", transport="http", url="http://127.0.0.1:9/mcp")
    made = settings_of(cli, enabled_tools=["get_current_time"])
    made.parameters = {
        "enabled_tools": ["get_current_time", "docs__search_docs", "docs__*", "wiki__*"]
    }
    made.save()
    agents("create", "Docs", "--from-conversation", str(made.pk))
    path = tmp_path / "docs.json"
    agents("export", "Docs", "--output", str(path))

    _, err = agents("import", str(path), "--name", "Docs here")

    assert err.splitlines() == [
        "MCP server 'docs' is not configured here: docs__search_docs (v1), docs__* (v1) kept, "
        "unavailable until it is added."
    ]
    version = AgentVersion.objects.get(agent__name="Docs here")
    assert version.agent_parameters().enabled_tools == (
        "get_current_time",
        "docs__search_docs",
        "docs__*",
        "wiki__*",
    )
    shown = as_json("show", "Docs here")["version"]
    assert shown["unavailable_tools"] == ["docs__search_docs", "docs__*"]
    text = agents("show", "Docs here")[0]
    assert "docs__search_docs (unavailable here), docs__* (unavailable here), wiki__*" in text


def test_a_tool_unknown_here_is_kept_and_said(cli: User, tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(agent_file(parameters={"enabled_tools": ["module_tool"]})))

    _, err = agents("import", str(path))

    assert err.strip() == "Tool 'module_tool' is not available here (v1): kept, not offered."
    assert AgentVersion.objects.get().parameters["enabled_tools"] == ["module_tool"]


def agent_file(**version: Any) -> dict[str, Any]:
    return {
        "format": "agentlab.agent",
        "version": 1,
        "name": "Imported",
        "published": 1,
        "versions": [{"number": 1, **version}],
    }


DEEP = "[" * 100 + "]" * 100


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("not json", "Not an agent file: not JSON: Expecting value: line 1 column 1 (char 0)."),
        ("[]", "Not an agent file: it holds no JSON object."),
        ('{"format": "agentlab.full"}', "Not an agent file: its format is not 'agentlab.agent'."),
        (
            json.dumps(agent_file()).replace('"number": 1', '"number": 1, "x": NaN'),
            "Not an agent file: not JSON: NaN is not a JSON number.",
        ),
        (
            json.dumps(agent_file(note="")).replace('"note": ""', f'"note": {DEEP}'),
            "Not an agent file: nested more than 64 levels deep.",
        ),
        (
            json.dumps(agent_file(note="half \ud800")),
            "Not an agent file: a string holds a lone surrogate (\\ud800-\\udfff), which is not "
            "text.",
        ),
        (
            json.dumps(agent_file(parameters={"temperature": 9})),
            "Not imported: versions.0: parameters: The agent's settings are invalid: temperature: "
            "Input should be less than or equal to 2.",
        ),
        (
            json.dumps(agent_file(parameters={"colour": "blue"})),
            "Not imported: versions.0: parameters: The agent's settings are invalid: colour: "
            "Extra inputs are not permitted.",
        ),
        (
            json.dumps({**agent_file(), "published": 2}),
            "Not imported: published: there is no version 2.",
        ),
        (
            json.dumps({**agent_file(), "versions": [{"number": 1}, {"number": 1}]}),
            "Not imported: two versions have the same number.",
        ),
        (
            json.dumps({**agent_file(), "versions": []}),
            "Not imported: versions: Value should have at least 1 item after validation, not 0.",
        ),
        (
            json.dumps(agent_file(note="x" * 10_001)),
            "Not imported: versions.0: note: 10,001 characters, more than the 10,000 allowed.",
        ),
        (json.dumps(agent_file(endpoint="elsewhere")), "talks to the provider 'elsewhere'"),
        (json.dumps({**agent_file(), "name": "Default"}), "is the built-in agent"),
        (json.dumps({**agent_file(), "name": "Taken"}), "An agent with this name already exists."),
    ],
)
def test_a_bad_file_is_refused_in_one_line_and_nothing_is_stored(
    cli: User, tmp_path: Path, text: str, said: str
) -> None:
    agents("create", "Taken", "--from-conversation", str(settings_of(cli).pk))
    path = tmp_path / "agent.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")

    assert said in refused("import", str(path))
    assert list(Agent.objects.values_list("name", flat=True)) == ["Taken"]
    assert AgentVersion.objects.count() == 1


def test_a_file_that_is_not_utf8_or_not_there_is_refused(cli: User, tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    path.write_bytes(b"\xff\xfe{}")
    assert refused("import", str(path)).startswith("Not an agent file: not UTF-8 text")
    assert refused("import", str(tmp_path / "none.json")).startswith("Cannot read ")
    assert refused("export", "Nobody", "--output", str(tmp_path)).startswith("No agent named")
    assert not Agent.objects.exists()


def test_a_version_on_a_provider_profile_imports_where_that_profile_is_usable(
    cli: User, tmp_path: Path
) -> None:
    ProviderProfile.objects.create(
        name="local", base_url="http://127.0.0.1:9/v1", model="m", available_to_everyone=True
    )
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(agent_file(endpoint="local")))

    shown = as_json("import", str(path))

    assert shown["version"]["endpoint"] == "local" and shown["version"]["model"] == "m"
    assert AgentVersion.objects.get().profile.name == "local"  # type: ignore[union-attr]
