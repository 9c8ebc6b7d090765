"""What the rolling-restart tests share (tests/scaleout/test_rolling_restart.py): the strict fake
provider's script, the site's conversations on it, and what each run must look like after."""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import re
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

import httpx

from chat.testing.openai_script import MODEL, ScriptedResponse, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from chat.testing.rolling import Fleet, Followed
from chat.testing.site import Site

SITE_ENV = {
    "AGENTLAB_TOOL_MODULES": "tests.scaleout.rolling_tools",
    # Shorter than a reply: a deploy lets the runs still streaming go mid-step, to resume.
    "AGENTLAB_SHUTDOWN_SECONDS": "4",
    "AGENTLAB_CHECKPOINT_SECONDS": "0.5",
    "AGENTLAB_TITLES": "off",  # a title would be one more request to the provider
}
LOGGED_TOOLS = ("read_ledger", "book_slot")
TAG = re.compile(r"\[c(\d+)\]")
MARKUP = re.compile(r"<[^>]+>")
TURNS = 2
"""Model turns of a run: the round of tool calls, then the reply."""

_ON_PROVIDER = """
from chat.models import Conversation, ProviderProfile
profile, _ = ProviderProfile.objects.update_or_create(
    name="fake",
    defaults={{"base_url": {url!r}, "model": {model!r}, "api_key_env": "",
               "available_to_everyone": True}},
)
Conversation.objects.filter(pk__in={ids!r}).update(profile=profile)
# The ledger and the booking are not read-only: they run without asking here (these tests are
# about processes, not approvals; a run waiting for a person holds no process).
for conversation in Conversation.objects.filter(pk__in={ids!r}):
    parameters = conversation.agent_parameters()
    policies = {{**parameters.tool_policies, "read_ledger": "run", "book_slot": "run"}}
    conversation.set_agent_parameters(parameters.model_copy(update={{"tool_policies": policies}}))
    conversation.save(update_fields=["parameters"])
"""


def reply(conversation: int, words: int) -> str:
    return f"Done for c{conversation}: " + " ".join(f"w{n}" for n in range(words)) + " end."


class Provider:
    """The strict fake provider answering each run by its conversation's tag: a round of three
    calls (the built-in clock, a read, a write), then a reply streamed over some seconds."""

    def __init__(self, fake: FakeOpenAIServer) -> None:
        self.fake = fake
        self.words = 60
        self.chunk_seconds = 0.2
        """Between chunks of 6 characters: a reply of n words streams for about n / 7 s."""
        fake.responder = self.respond

    def respond(self, body: Any) -> ScriptedResponse:
        conversation = tag_of(body)
        if body["messages"][-1]["role"] == "user":
            ticket = json.dumps({"ticket": f"c{conversation}"})
            return tool_turn(
                [
                    ("call_time", "get_current_time", '{"timezone": "UTC"}'),
                    ("call_read", "read_ledger", ticket),
                    ("call_book", "book_slot", ticket),
                ]
            )
        text = reply(conversation, self.words)
        return text_turn(text, chunk_size=6).but(chunk_delay=self.chunk_seconds)

    def requests(self) -> dict[int, list[list[dict[str, Any]]]]:
        """The messages of every completion request, by conversation."""
        found: dict[int, list[list[dict[str, Any]]]] = defaultdict(list)
        for request in list(self.fake.requests):
            if request.method == "POST" and isinstance(request.body, dict):
                found[tag_of(request.body)].append(request.body["messages"])
        return found

    async def until_streaming(self, conversations: list[int]) -> None:
        """Until every conversation's reply is being asked for (its tool round is done)."""
        async with asyncio.timeout(60):
            # The requests are counted by the server's threads: nothing here to wait on.
            while not all(len(self.requests()[c]) >= TURNS for c in conversations):  # noqa: ASYNC110
                await asyncio.sleep(0.1)


def tag_of(body: dict[str, Any]) -> int:
    users = [m["content"] for m in body["messages"] if m["role"] == "user"]
    found = TAG.search(str(users[-1])) if users else None
    return int(found.group(1)) if found else 0


def prompt(conversation: int) -> str:
    return f"[c{conversation}] Check the time and the ledger, book a slot, then tell me."


def conversations(
    site: Site, provider: Provider, username: str, count: int
) -> tuple[str, list[int]]:
    """A user's session and `count` conversations on the fake provider's profile."""
    session, ids = site.make_conversations(count, username)
    script = _ON_PROVIDER.format(url=provider.fake.base_url, model=MODEL, ids=ids)
    site.manage("shell", stdin=script)
    return session, ids


def where(ids: list[int]) -> str:
    return f"conversation_id in ({', '.join(map(str, ids))})"


def executions(site: Site) -> Counter[tuple[str, str]]:
    """How many times each (tool, ticket) executed, in any process."""
    path = site.directory / "var" / "tool-executions.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter((row["tool"], row["ticket"]) for row in map(json.loads, lines))


def shown(frame: str) -> str:
    """A frame's text as the page shows it."""
    return " ".join(html.unescape(MARKUP.sub(" ", frame)).split())


def assert_whole_replies(site: Site, provider: Provider, ids: list[int]) -> None:
    """Each conversation: the user's message, the round of calls and their three results, and
    one reply, exactly the provider's (no draft left, nothing twice); every call completed."""
    rows = site.sql(
        f"select conversation_id, role, content from chat_message where {where(ids)} "
        "and version_id is null order by conversation_id, index"
    )
    by_conversation: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for conversation, role, content in rows:
        by_conversation[int(str(conversation))].append((str(role), str(content)))
    for conversation in ids:
        roles = [role for role, _ in by_conversation[conversation]]
        assert roles == ["user", "assistant", "tool", "tool", "tool", "assistant"], conversation
        assert by_conversation[conversation][-1][1] == reply(conversation, provider.words)
    calls = site.sql(
        "select chat_toolcall.status, count(*) from chat_toolcall join chat_run on chat_run.id = "
        f"run_id where {where(ids)} group by chat_toolcall.status"
    )
    assert calls == [("completed", 3 * len(ids))]


def assert_each_tool_call_executed_once(site: Site, ids: list[int]) -> None:
    wanted = {(tool, f"c{c}"): 1 for c in ids for tool in LOGGED_TOOLS}
    counted = executions(site)
    assert {key: counted[key] for key in wanted} == wanted


def assert_clients_saw_the_end(
    followed: list[Followed], provider: Provider, fleet: Fleet, session: str
) -> None:
    """Each client saw its run end with the whole reply, and the page shows it too."""
    for seen in followed:
        assert seen.done, f"conversation {seen.conversation}: no end in {len(seen.frames)} frames"
        whole = reply(seen.conversation, provider.words)
        assert whole in shown(seen.final), shown(seen.final)
        server = fleet.live()[seen.conversation % len(fleet.live())]
        page = httpx.get(f"{server.url}/c/{seen.conversation}/", cookies={"sessionid": session})
        assert whole in shown(page.text)


def lease_rows(site: Site, ids: list[int]) -> dict[int, list[tuple[str, str, datetime, Any]]]:
    """The leases of each conversation's run, in order: (worker, outcome, acquired, ended)."""
    rows = site.sql(
        "select conversation_id, chat_runlease.worker, outcome, acquired_at, ended_at "
        "from chat_runlease "
        f"join chat_run on chat_run.id = run_id where {where(ids)} "
        "order by conversation_id, acquired_at, chat_runlease.id"
    )
    found: dict[int, list[tuple[str, str, datetime, Any]]] = defaultdict(list)
    for conversation, worker, outcome, acquired, ended in rows:
        assert isinstance(acquired, datetime)
        found[int(str(conversation))].append((str(worker), str(outcome), acquired, ended))
    return found


def handovers(leases: dict[int, list[tuple[str, str, datetime, Any]]]) -> list[float]:
    """Seconds from a process letting a run go (or dying) to the next one claiming it."""
    gaps = []
    for held in leases.values():
        for (_, _, _, ended), (_, _, acquired, _) in itertools.pairwise(held):
            gaps.append((acquired - ended).total_seconds())
    return gaps
