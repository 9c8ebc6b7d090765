"""A conversation whose chosen tools are more than a request may carry (128): its run fails
before any request reaches the provider, with one line counting the tools by source, and the
user's message is kept."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from channels.db import database_sync_to_async
from django.test import Client

from chat import agent
from chat.models import Conversation, McpServer, McpTool, Message
from chat.runs import mcp as hub_module
from chat.testing import factories as make
from chat.testing.mcp_server import McpHttpServer
from chat.testing.openai_script import text_turn
from chat.testing.openai_server import FakeOpenAIServer, client_for

pytestmark = pytest.mark.django_db(transaction=True)
QUESTION = "Which of all these tools fits best?"


@pytest.fixture(scope="module")
def filler_http() -> Iterator[McpHttpServer]:
    with McpHttpServer("filler", extra_tools=130) as server:
        yield server


@database_sync_to_async
def conversation_choosing(*tools: str) -> Conversation:
    made = make.conversation(make.user(), "many tools")
    made.parameters = {"enabled_tools": list(tools)}  # as the settings store a choice
    made.save()
    return made


async def test_too_many_tools_fail_the_run_before_any_request(
    filler_http: McpHttpServer, hub: hub_module.Hub, fake_openai: FakeOpenAIServer
) -> None:
    server = await database_sync_to_async(McpServer.objects.create)(
        name="filler", transport="http", url=filler_http.url
    )
    await hub.refresh(server)
    built_in = agent.default_registry.built_in_names()
    made = await conversation_choosing(*built_in, "filler__*")
    fake_openai.enqueue(text_turn("never asked"))

    handle = await make.start_as_owner(made, QUESTION, client_for(fake_openai.base_url))
    run = await handle.task
    await run.arefresh_from_db()

    assert fake_openai.requests == []
    offered = await McpTool.objects.chosen(["filler__*"]).acount()
    assert offered > 130  # its own tools and the fillers; not the task-only one
    total = offered + len(built_in)
    assert (run.status, run.steps) == ("failed", 0)
    assert run.error == (
        f"This run offers {total} tools; the most a request may carry is 128. "
        f"By source: filler ({offered}), built-in ({len(built_in)}). "
        "Turn some off in the settings."
    )
    kept = [m async for m in Message.objects.filter(conversation=made).order_by("index")]
    assert [(m.role, m.content) for m in kept] == [("user", QUESTION)]

    page = await database_sync_to_async(page_of)(made)
    assert f"This run offers {total} tools" in page
    assert QUESTION in page


def page_of(made: Conversation) -> str:
    client = Client()
    client.force_login(made.owner)
    return client.get(f"/c/{made.pk}/").content.decode()
