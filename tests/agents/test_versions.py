"""Versions (chat/agents/versions.py): an agent from a conversation's settings, new versions,
a conversation started from one that a strict provider sees exactly as the version holds it,
and the names commands will write (NAME, NAME@N)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import Permission, User
from django.db import close_old_connections, connection

from chat import agents
from chat.models import (
    Agent,
    AgentVersion,
    Conversation,
    McpServer,
    ProviderProfile,
    Publication,
    Visibility,
)
from chat.runs import default_parameters
from chat.runs import mcp as hub_module
from chat.testing import factories as make
from chat.testing.mcp_server import McpHttpServer
from chat.testing.openai_script import MODEL, text_turn
from chat.testing.openai_server import FakeOpenAIServer

MCP_TOOLS = ["get_current_time", "docs__search_docs", "docs__*"]


def chosen(owner: User, tools: list[str] | None = None, **parameters: Any) -> Conversation:
    """A conversation of `owner`'s with these settings; tools stored as the settings form
    stores a choice (MCP names need no server to be kept)."""
    made = make.conversation(owner, "settings", **parameters)
    if tools is not None:
        made.parameters = {**made.parameters, "enabled_tools": tools}
        made.save()
    return made


def with_settings(made: Conversation, **changes: Any) -> Conversation:
    made.set_agent_parameters(made.agent_parameters().changed(**changes))
    made.save()
    return made


# Making an agent ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_agent_from_a_conversation_keeps_its_settings_mcp_tools_and_whole_servers() -> None:
    ada = make.user("ada")
    made = chosen(ada, MCP_TOOLS, system_prompts=["Answer for support."], temperature=0.2)

    agent = agents.create_agent(
        name="Support", conversation=made, user=ada, description="Answers customers."
    )

    version = agent.versions.get()
    assert (agent.slug, agent.owner, agent.visibility) == ("support", ada, Visibility.PRIVATE)
    assert (version.number, version.author, version.note) == (1, ada, "First version.")
    assert agent.published == version
    parameters = version.agent_parameters()
    assert parameters.enabled_tools == tuple(MCP_TOOLS)
    assert (parameters.system_prompts, parameters.temperature) == (("Answer for support.",), 0.2)
    assert version.profile is None
    publication = Publication.objects.get()
    assert (publication.version, publication.published_by) == (version, ada)
    made.refresh_from_db()
    assert made.agent_version == version and made.changed_from() is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("  ", "An agent needs a name."),
        ("Default", "“Default” is the built-in agent"),
        ("Support@2", "cannot hold “@”"),
        ("x" * 101, "at most 100 characters"),
    ],
)
def test_names_that_are_refused_store_nothing(name: str, reason: str) -> None:
    ada = make.user("ada")
    with pytest.raises(agents.AgentRefused, match=reason):
        agents.create_agent(name=name, conversation=chosen(ada), user=ada)
    assert not Agent.objects.exists() and not AgentVersion.objects.exists()


@pytest.mark.django_db
def test_a_taken_name_is_refused_and_a_taken_slug_gets_a_number() -> None:
    ada = make.user("ada")
    agents.create_agent(name="Support", conversation=chosen(ada), user=ada)
    with pytest.raises(agents.AgentRefused, match=r"An agent with this name already exists\."):
        agents.create_agent(name="Support", conversation=chosen(ada), user=ada)

    second = agents.create_agent(name="support!", conversation=chosen(ada), user=ada)
    third = agents.create_agent(name="Default agent?", conversation=chosen(ada), user=ada)
    assert (second.slug, third.slug) == ("support-2", "default-agent")
    assert Agent.objects.count() == 3


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"description": "a NUL \x00"}, "NUL character"),
        ({"description": "x" * 10_001}, "10,001 characters, more than the 10,000 allowed"),
        ({"note": "half \udc00"}, "lone surrogate"),
        ({"visibility": "world"}, "'world' is not a valid choice"),
    ],
)
def test_text_past_the_gate_is_refused_with_one_line(fields: dict[str, Any], reason: str) -> None:
    ada = make.user("ada")
    with pytest.raises(agents.AgentRefused, match=reason) as refused:
        agents.create_agent(name="Support", conversation=chosen(ada), user=ada, **fields)
    assert "\n" not in str(refused.value)
    assert not Agent.objects.exists()


@pytest.mark.django_db
def test_settings_the_gate_keeps_out_are_refused_and_nothing_is_stored() -> None:
    ada = make.user("ada")
    made = chosen(ada)
    made.parameters = {"system_prompts": ["x \ud800"]}  # as SQLite may hold it

    with pytest.raises(agents.AgentRefused) as refused:
        agents.create_agent(name="Support", conversation=made, user=ada)

    assert str(refused.value) == (
        "The agent's settings cannot be stored: a string holds a lone surrogate "
        "(\\ud800-\\udfff), which is not text."
    )
    assert not Agent.objects.exists()


@pytest.mark.django_db
def test_invalid_conversation_settings_are_refused() -> None:
    ada = make.user("ada")
    made = chosen(ada)
    Conversation.objects.filter(pk=made.pk).update(parameters={"temperature": 9})
    made.refresh_from_db()
    with pytest.raises(agents.AgentRefused, match="The settings of this conversation are invalid"):
        agents.create_agent(name="Support", conversation=made, user=ada)


# New versions ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_new_version_from_changed_settings_with_a_note() -> None:
    ada = make.user("ada")
    made = chosen(ada, system_prompts=["Be brief."])
    agent = agents.create_agent(name="Support", conversation=made, user=ada)
    with_settings(made, system_prompts=["Be brief.", "Cite the docs."])
    assert made.changed_from() == agent.published

    draft = agents.new_version(agent=agent, conversation=made, user=ada, note=" Cite docs. ")

    assert (draft.number, draft.note, draft.author) == (2, "Cite docs.", ada)
    agent.refresh_from_db()
    assert agent.published.number == 1  # a draft until published
    made.refresh_from_db()
    assert made.agent_version == draft and made.changed_from() is None

    with_settings(made, temperature=1.0)
    third = agents.new_version(agent=agent, conversation=made, user=ada)
    agents.publish(version=third, user=ada)
    agent.refresh_from_db()
    assert (third.number, agent.published) == (3, third)
    assert list(Publication.objects.values_list("version__number", flat=True)) == [3, 1]


@pytest.mark.django_db
def test_settings_that_are_the_latest_versions_make_no_version() -> None:
    ada = make.user("ada")
    made = chosen(ada, enabled_tools=["get_current_time", "handoff_note"])
    agent = agents.create_agent(name="Support", conversation=made, user=ada)
    made.parameters = {"enabled_tools": ["handoff_note", "get_current_time"]}
    made.save()
    with pytest.raises(agents.AgentRefused, match="These settings are Support v1's"):
        agents.new_version(agent=agent, conversation=made, user=ada)
    assert agent.versions.count() == 1


@pytest.mark.django_db
def test_a_reader_saves_a_shared_conversations_settings_without_changing_it() -> None:
    ada, bob = make.user("ada"), make.user("bob")
    made = chosen(ada, system_prompts=["Ada's prompt."])
    made.shared = True
    made.save()

    agent = agents.create_agent(name="Bob's", conversation=made, user=bob)

    assert agent.owner == bob
    assert agent.published.agent_parameters().system_prompts == ("Ada's prompt.",)
    made.refresh_from_db()
    assert made.agent_version is None  # Ada's conversation records nothing of Bob's agent


@pytest.mark.django_db(transaction=True)
def test_versions_made_at_once_get_the_next_numbers() -> None:
    ada = make.user("ada")
    agent = agents.create_agent(name="Support", conversation=chosen(ada), user=ada)
    conversations = [chosen(ada, temperature=t) for t in (0.1, 0.2, 0.3, 0.4)]

    results = at_once(
        [
            lambda made=made: agents.new_version(agent=agent, conversation=made, user=ada)
            for made in conversations
        ]
    )

    assert all(isinstance(result, AgentVersion) for result in results), results
    assert sorted(agent.versions.values_list("number", flat=True)) == [1, 2, 3, 4, 5]


def at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Each call in a thread of its own (its own connection), released together; what each
    returned or raised."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def work(index: int) -> None:
        try:
            barrier.wait()
            results[index] = calls[index]()
        except Exception as exc:
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(index,)) for index in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    close_old_connections()
    return results


# Starting a conversation -------------------------------------------------------------------


@pytest.mark.django_db
def test_default_starts_with_the_servers_own_settings_and_no_version() -> None:
    made = agents.start_conversation(user=make.user("ada"), version=None)
    assert made.agent_parameters() == default_parameters()
    assert (made.profile, made.agent_version, made.changed_from()) == (None, None, None)


@pytest.mark.django_db
def test_a_version_whose_endpoint_the_user_may_not_use_is_refused() -> None:
    ada, bob = make.user("ada", is_superuser=True), make.user("bob")
    closed = ProviderProfile.objects.create(name="closed", base_url="http://c:1/v1", model="m")
    made = chosen(ada)
    made.profile = closed
    made.save()
    agent = agents.create_agent(
        name="Support", conversation=made, user=ada, visibility=Visibility.TEAM
    )

    with pytest.raises(agents.AgentRefused, match="Support v1 talks to the provider 'closed'"):
        agents.start_conversation(user=bob, version=agent.published)
    assert Conversation.objects.filter(owner=bob).count() == 0
    assert agents.start_conversation(user=ada, version=agent.published).profile == closed


@pytest.mark.django_db(transaction=True)
async def test_the_provider_sees_exactly_the_versions_prompts_and_tools(
    docs_http: McpHttpServer, hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    """Bob starts from Ada's team agent, published and draft: each request carries that
    version's system prompts, pre-messages and tools (MCP ones too), sent to its endpoint;
    nothing of Ada's conversation as it is now."""
    server = await database_sync_to_async(McpServer.objects.create)(
        name="docs", transport="http", url=docs_http.url
    )
    await hub.refresh(server)

    def prepare() -> tuple[User, AgentVersion, AgentVersion]:
        ada, bob = make.user("ada"), make.user("bob")
        endpoint = ProviderProfile.objects.create(
            name="local",
            base_url=fake_openai.base_url,
            api_key_env="",
            model=MODEL,
            available_to_everyone=True,
        )
        made = chosen(
            ada,
            ["get_current_time", "docs__search_docs"],
            system_prompts=["You answer for the support team."],
            pre_messages=[{"role": "assistant", "content": "How can I help?"}],
        )
        made.profile = endpoint
        made.save()
        agent = agents.create_agent(
            name="Support", conversation=made, user=ada, visibility=Visibility.TEAM
        )
        made.parameters = {"system_prompts": ["Cite the docs."], "enabled_tools": ["docs__*"]}
        made.save()
        agents.new_version(agent=agent, conversation=made, user=ada)
        with_settings(made, system_prompts=["Ada's later prompt."], enabled_tools=[])
        return bob, agents.find_version(bob, "Support"), agents.find_version(bob, "Support@2")

    bob, published, draft = await database_sync_to_async(prepare)()
    fake_openai.enqueue(text_turn("Hello."), text_turn("Hello again."))

    for version in (published, draft):
        started = await database_sync_to_async(agents.start_conversation)(user=bob, version=version)
        run = await (await make.start_as_owner(started, "Hi")).task
        assert run.status == "completed", run.error

    first, second = (request.body for request in fake_openai.requests if request.method == "POST")
    assert first["messages"] == [
        {"role": "system", "content": "You answer for the support team."},
        {"role": "assistant", "content": "How can I help?"},
        {"role": "user", "content": "Hi"},
    ]
    assert [tool["function"]["name"] for tool in first["tools"]] == [
        "get_current_time",
        "docs__search_docs",
    ]
    assert second["messages"][:-1] == [{"role": "system", "content": "Cite the docs."}]
    offered = {tool["function"]["name"] for tool in second["tools"]}
    assert "docs__search_docs" in offered and "docs__add" in offered
    assert "get_current_time" not in offered
    assert fake_openai.pending == 0  # the strict provider refused nothing


# Names ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_version_is_found_by_name_slug_and_number() -> None:
    ada = make.user("ada")
    made = chosen(ada)
    agent = agents.create_agent(name="Support Desk", conversation=made, user=ada)
    draft = agents.new_version(agent=agent, conversation=with_settings(made, top_p=0.5), user=ada)

    assert agents.find_version(ada, "Support Desk") == agent.published
    assert agents.find_version(ada, "support-desk@2") == draft
    assert agents.find_version(ada, "default") is None
    refusals = {
        "Support Desk@3": "Support Desk has no version 3 (it has 1 to 2).",
        "Support Desk@v2": "'Support Desk@v2': write NAME, or NAME@N for its version N.",
        "Default@1": "The built-in Default agent has no numbered versions.",
        "Billing": "No agent named 'Billing' that you may use.",
    }
    for reference, reason in refusals.items():
        with pytest.raises(agents.AgentRefused) as refused:
            agents.find_version(ada, reference)
        assert str(refused.value) == reason
    with pytest.raises(agents.AgentRefused, match="No agent named 'Support Desk'"):
        agents.find_version(make.user("bob"), "Support Desk")  # private to Ada


@pytest.mark.django_db
def test_the_rule_is_asked_of_the_agent_as_it_is_now_not_as_last_read() -> None:
    ada, sam = make.user("ada"), make.user("sam")
    sam.user_permissions.add(Permission.objects.get(codename="change_agent"))
    sam = User.objects.get(pk=sam.pk)
    made = chosen(ada)
    agent = agents.create_agent(
        name="Support", conversation=made, user=ada, visibility=Visibility.TEAM
    )
    draft = agents.new_version(agent=agent, conversation=with_settings(made, top_p=0.1), user=ada)
    Agent.objects.filter(pk=agent.pk).update(visibility=Visibility.PRIVATE)  # as Sam reads on

    with pytest.raises(agents.AgentRefused, match="This agent is private"):
        agents.new_version(agent=agent, conversation=chosen(sam, top_p=0.2), user=sam)
    with pytest.raises(agents.AgentRefused, match="This agent is private"):
        agents.publish(version=draft, user=sam)
    agent.refresh_from_db()
    assert (agent.versions.count(), agent.published.number) == (2, 1)


@pytest.mark.django_db
def test_a_name_is_found_before_another_agents_slug_spelled_like_it() -> None:
    ada = make.user("ada")
    agents.create_agent(name="Support", conversation=chosen(ada), user=ada)
    punctuated = agents.create_agent(name="support!", conversation=chosen(ada), user=ada)
    named = agents.create_agent(name="support-2", conversation=chosen(ada), user=ada)
    assert (punctuated.slug, named.slug) == ("support-2", "support-2-2")
    assert agents.find_version(ada, "support-2") == named.published
    assert agents.find_version(ada, "support-2-2") == named.published


@pytest.mark.django_db
def test_a_conversation_starts_from_the_version_as_it_is_now() -> None:
    ada, bob = make.user("ada"), make.user("bob")
    agent = agents.create_agent(
        name="Support", conversation=chosen(ada), user=ada, visibility=Visibility.TEAM
    )
    version = agent.published
    Agent.objects.filter(pk=agent.pk).update(visibility=Visibility.PRIVATE)
    with pytest.raises(agents.AgentRefused, match="This agent is private"):
        agents.start_conversation(user=bob, version=version)

    Agent.objects.filter(pk=agent.pk).delete()
    with pytest.raises(agents.AgentRefused, match=r"^This agent was deleted\.$"):
        agents.start_conversation(user=ada, version=version)
    assert not Conversation.objects.filter(agent_version__isnull=False).exists()
    assert Conversation.objects.filter(owner=bob).count() == 0
