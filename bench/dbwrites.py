"""Database writes per run, counted in the process that executes the run.

`python -m bench.dbwrites --base-url URL --lengths 100,1000,10000` runs `runs.start_run` with an
OpenAICompatibleChatClient against the bench provider, once per reply length, and counts the
INSERT, UPDATE and DELETE statements every database connection of the process executes (the run
writes from sync_to_async's thread, so the counter goes on every connection as it is created).
It prints one JSON object. The environment (DATABASE_URL, ...) comes from chat.testing.site.Site.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

_TABLE = re.compile(r'^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+"?([\w.]+)"?', re.I)


class WriteCounter:
    """An execute wrapper that counts writing statements by verb and table."""

    def __init__(self) -> None:
        self.writes: Counter[str] = Counter()
        self.queries = 0

    def reset(self) -> None:
        self.writes.clear()
        self.queries = 0

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        self.queries += 1
        verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        if verb in {"INSERT", "UPDATE", "DELETE"}:
            match = _TABLE.match(sql)
            self.writes[f"{verb} {match.group(1) if match else '?'}"] += 1
        return execute(sql, params, many, context)

    @property
    def total(self) -> int:
        return sum(self.writes.values())


def measure(base_url: str, lengths: list[int], tool_rounds: int) -> dict[str, Any]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentlab_site.settings")
    import django

    django.setup()
    from channels.db import database_sync_to_async
    from django.contrib.auth import get_user_model
    from django.db import connections
    from django.db.backends.signals import connection_created

    from bench.provider import MODEL, ReplySpec
    from bench.stats import check_tokens
    from chat import runs
    from chat.agent.clients import OpenAICompatibleChatClient
    from chat.models import Conversation, Message

    counter = WriteCounter()

    def install(sender: Any, connection: Any, **kwargs: Any) -> None:
        if counter not in connection.execute_wrappers:
            connection.execute_wrappers.append(counter)

    connection_created.connect(install, weak=False)
    for connection in connections.all():
        install(None, connection)

    def make_conversation(user: Any) -> Conversation:
        conversation = Conversation(owner=user)
        conversation.set_agent_parameters(runs.default_parameters())
        conversation.save()
        return conversation

    def reply_text(run_id: int) -> str:
        return "".join(
            message.content or ""
            for message in Message.objects.filter(run_id=run_id, role="assistant").order_by("index")
        )

    async def one(user: Any, length: int) -> dict[str, Any]:
        conversation = await database_sync_to_async(make_conversation)(user)
        spec = ReplySpec(tag=uuid.uuid4().hex[:10], tokens=length, tools=tool_rounds)
        client = OpenAICompatibleChatClient(base_url=base_url, api_key="bench-key", model=MODEL)
        counter.reset()
        handle = await runs.start_run(
            conversation=conversation, user=user, content=spec.prompt(), client=client
        )
        run = await handle.task
        writes, queries = dict(sorted(counter.writes.items())), counter.queries
        total = counter.total
        stored = await database_sync_to_async(reply_text)(run.pk)
        return {
            "tokens": length,
            "status": run.status,
            "duration": run.duration,
            # A long reply's draft row is written every AGENTLAB_CHECKPOINT_SECONDS while it
            # streams (the first INSERT stands in for the reply's own): these grow with time.
            "checkpoints": writes.get("UPDATE chat_message", 0),
            "writes": total,
            "by_statement": writes,
            "queries": queries,
            "stored_text": check_tokens(stored, length).as_dict(),
        }

    async def main() -> list[dict[str, Any]]:
        user = await get_user_model().objects.acreate(username=f"dbwrites-{uuid.uuid4().hex[:6]}")
        return [await one(user, length) for length in lengths]

    from django.conf import settings

    results = asyncio.run(main())
    totals = {result["writes"] - result["checkpoints"] for result in results}
    return {
        "tool_rounds": tool_rounds,
        "checkpoint_seconds": settings.AGENTLAB_CHECKPOINT_SECONDS,
        "runs": results,
        "equal": len(totals) == 1,
        "writes_per_run": results[0]["writes"] - results[0]["checkpoints"]
        if len(totals) == 1
        else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Database writes per run, by reply length.")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--lengths", default="100,1000,10000")
    parser.add_argument("--tool-rounds", type=int, default=0)
    args = parser.parse_args()
    lengths = [int(length) for length in args.lengths.split(",")]
    print(json.dumps(measure(args.base_url, lengths, args.tool_rounds)))


if __name__ == "__main__":
    main()
