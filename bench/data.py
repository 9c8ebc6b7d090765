"""The big database of `manage.py bench --data`: real rows made through the runtime, multiplied.

`python -m bench.data build --base-url URL --conversations N [--messages M]` runs in the site's
environment (chat.testing.site.Site). A few seed conversations of the user `heavy` are made by
`runs.start_run` against the bench provider (a tool round on every turn), then copied with one
`INSERT ... SELECT` per table until there are N conversations: `heavy` owns a few thousand,
ten `member` users the rest, `light` one copy of the first seed. Then one conversation of
`--long-turns` turns with tool rounds and one of about 50 KB for the import rate are made
through the runtime too, not copied. `sessions` logs `light`, `heavy` and `staff` in. Each
prints one JSON object.

The copy knows no table: it reads Django's model metadata, so it keeps working as the schema
changes. Every model whose non-null foreign keys lead to Conversation is copied; a copy's primary
key and every foreign key into a copied table move by the copy's number times the table's
largest key; keys to users become the copy's owner; generated columns are left to the database
(and search triggers index the copies as they would index any insert).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import uuid
from datetime import datetime, timedelta
from typing import Any

SEEDS = 10
"""Seed conversations made through the runtime; the rest are their copies."""
HEAVY = 3000
"""Conversations of the user with thousands (at most; the rest go to the members)."""
MEMBERS = 10
TURN_MESSAGES = 4
"""A turn with a tool round: the user's message, the call, its result, the reply."""
REPLY_TOKENS = 24
IMPORT_TOKENS = 60
"""Reply length of the import conversation's turns: its full record is about 50 KB."""
IMPORT_TURNS = 2
COMMON_WORD = "budget"
RARE_WORD = "quetzalcoatl"
NO_HIT_WORD = "zyxwvutsrq"
TOPICS = (
    "the quarterly budget for the Lisbon office",
    "a budget summary of the marketing plan",
    "the budget of the data migration and its risks",
    "budget numbers for the hiring plan in spring",
    "why the budget forecast missed the cloud invoices",
    "a budget check of travel costs for the conference",
    "the support budget and the ticket backlog",
    "budget notes from the planning meeting",
    "a budget of hours for the security review",
    "the training budget and the course list",
)


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentlab_site.settings")
    import django

    django.setup()


def copied_models() -> dict[type[Any], str]:
    """Every model reached from Conversation by non-null foreign keys, with its lookup path to
    a conversation ("" for Conversation itself), parents before children."""
    from django.apps import apps

    from chat.models import Conversation

    paths: dict[type[Any], str] = {Conversation: ""}
    changed = True
    while changed:
        changed = False
        for model in apps.get_models(include_auto_created=True):
            if model in paths or not model._meta.managed or model._meta.proxy:
                continue
            for field in model._meta.concrete_fields:
                target = field.related_model if field.many_to_one or field.one_to_one else None
                if target in paths and not field.null and target is not model:
                    paths[model] = field.name + (f"__{paths[target]}" if paths[target] else "")
                    changed = True
                    break
    return paths


def multiply(seeds: list[int], owners: list[int], stamps: list[datetime]) -> list[int]:
    """Copy the conversations `seeds` and all their rows once per owner, with that owner and
    that time as the copy's creation and last activity; returns the new conversations' ids."""
    from django.conf import settings
    from django.core.management.color import no_style
    from django.db import connection, models, transaction

    from chat.models import Conversation

    paths = copied_models()
    quote = connection.ops.quote_name
    stamp_type = models.DateTimeField().db_type(connection)
    spans = {}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_copy")
        cursor.execute(
            f"CREATE TEMPORARY TABLE bench_copy (k integer PRIMARY KEY, owner_id bigint, "
            f"at {stamp_type})"
        )
        cursor.executemany(
            "INSERT INTO bench_copy (k, owner_id, at) VALUES (%s, %s, %s)",
            [
                (number, owner, connection.ops.adapt_datetimefield_value(stamp))
                for number, (owner, stamp) in enumerate(zip(owners, stamps, strict=True), 1)
            ],
        )
        for model in paths:
            cursor.execute(
                f"SELECT MAX({quote(model._meta.pk.column)}) FROM {quote(model._meta.db_table)}"
            )
            spans[model] = int(cursor.fetchone()[0] or 0)
        user_model = settings.AUTH_USER_MODEL.lower()
        for model, path in paths.items():
            if not spans[model]:
                continue
            columns, values = [], []
            for field in model._meta.concrete_fields:
                if getattr(field, "generated", False):
                    continue
                column = f"src.{quote(field.column)}"
                target = field.related_model if field.is_relation else None
                if field.primary_key:
                    column = f"{column} + cp.k * {spans[model]}"
                elif target in spans:
                    column = f"{column} + cp.k * {spans[target]}"
                elif target is not None and target._meta.label_lower == user_model:
                    column = f"CASE WHEN {column} IS NULL THEN NULL ELSE cp.owner_id END"
                elif model is Conversation and isinstance(field, models.DateTimeField):
                    column = "cp.at"  # created and last active: spread over the year
                columns.append(quote(field.column))
                values.append(column)
            lookup = f"{path}__in" if path else "pk__in"
            chosen = model._base_manager.filter(**{lookup: seeds}).values("pk")
            sql, params = chosen.query.sql_with_params()
            cursor.execute(
                f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(columns)}) "
                f"SELECT {', '.join(values)} FROM {quote(model._meta.db_table)} AS src "
                f"CROSS JOIN bench_copy AS cp WHERE src.{quote(model._meta.pk.column)} IN ({sql})",
                params,
            )
        for statement in connection.ops.sequence_reset_sql(no_style(), list(paths)):
            cursor.execute(statement)
        cursor.execute("DROP TABLE bench_copy")
    span = spans[Conversation]
    return [seed + number * span for number in range(1, len(owners) + 1) for seed in seeds]


async def _converse(conversation: Any, user: Any, base_url: str, turns: int, tokens: int) -> None:
    """`turns` runs through the real runtime, each a tool round and a reply of `tokens`."""
    from bench.provider import MODEL, ReplySpec
    from chat import runs
    from chat.agent.clients import OpenAICompatibleChatClient

    topic = TOPICS[conversation.pk % len(TOPICS)]
    for turn in range(turns):
        spec = ReplySpec(tag=uuid.uuid4().hex[:10], tokens=tokens, tools=1)
        client = OpenAICompatibleChatClient(base_url=base_url, api_key="bench-key", model=MODEL)
        content = f"{spec.prompt()} Turn {turn + 1}: what about {topic}?"
        handle = await runs.start_run(
            conversation=conversation, user=user, content=content, client=client
        )
        run = await handle.task
        if run.status != "completed":
            raise RuntimeError(f"run {run.pk} of the bench data ended {run.status}: {run.error}")


def _conversation(user: Any, title: str) -> Any:
    from chat import runs
    from chat.models import Conversation

    conversation = Conversation(owner=user, title=title)
    conversation.set_agent_parameters(runs.default_parameters())
    conversation.save()
    return conversation


def build(
    base_url: str, conversations: int, messages: int | None, long_turns: int
) -> dict[str, Any]:
    """The whole database; returns the ids the measurements need."""
    _setup()
    from asgiref.sync import sync_to_async
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from chat.models import Message

    users = get_user_model().objects
    heavy = users.create_user("heavy", password=None)
    light = users.create_user("light", password=None)
    staff = users.create_superuser("staff", "staff@example.com", password=None)
    members = [users.create_user(f"member{number}", password=None) for number in range(MEMBERS)]
    seeds = max(1, min(SEEDS, (conversations - 3) // 2))
    per_conversation = messages / conversations if messages else 3 * TURN_MESSAGES
    turns = max(1, round(per_conversation / TURN_MESSAGES))

    async def seed_all() -> list[int]:
        made = []
        for number in range(seeds):
            title = TOPICS[number % len(TOPICS)].capitalize()
            conversation = await sync_to_async(_conversation)(heavy, title)
            await _converse(conversation, heavy, base_url, turns, REPLY_TOKENS)
            made.append(conversation.pk)
        return made

    seed_ids = asyncio.run(seed_all())
    copies = max(0, math.ceil((conversations - 3) / seeds) - 1)
    heavy_copies = min(copies, max(0, math.ceil(HEAVY / seeds) - 1))
    owners = [heavy.pk if k < heavy_copies else members[k % MEMBERS].pk for k in range(copies)]
    now = timezone.now()
    year = timedelta(days=365)
    stamps = [now - year * (k + 1) / (copies + 1) for k in range(copies)]
    if copies:
        multiply(seed_ids, owners, stamps)
    light_ids = multiply(seed_ids[:1], [light.pk], [now])
    rare = Message.objects.filter(conversation_id=seed_ids[-1], role="user").order_by("index")
    Message.objects.filter(pk=rare.values_list("pk", flat=True)[0]).update(
        content=f"Turn 1: the {RARE_WORD} account of the budget"
    )

    async def unique() -> tuple[int, int]:
        long = await sync_to_async(_conversation)(heavy, "A long session: the budget audit")
        await _converse(long, heavy, base_url, long_turns, REPLY_TOKENS)
        source = await sync_to_async(_conversation)(staff, "Import source: the budget report")
        await _converse(source, staff, base_url, IMPORT_TURNS, IMPORT_TOKENS)
        return long.pk, source.pk

    long_id, import_id = asyncio.run(unique())
    info = {
        "seeds": seed_ids,
        "turns_per_seed": turns,
        "copies": copies,
        "heavy_conversation": seed_ids[0],
        "light_conversation": light_ids[0],
        "long_conversation": long_id,
        "long_turns": long_turns,
        "import_conversation": import_id,
        "member": members[0].get_username(),
    }
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE bench_data_info (info text)")
        cursor.execute("INSERT INTO bench_data_info (info) VALUES (%s)", [json.dumps(info)])
        cursor.execute("ANALYZE")
    return info


def counts() -> dict[str, int]:
    """Rows of the tables that grow with the work, and each test user's conversations."""
    from django.db.models import Count

    from chat.models import Conversation, Message, ModelCall, Run, ToolCall

    owners = dict(
        Conversation.objects.values_list("owner__username").annotate(n=Count("pk")).order_by()
    )
    return {
        "conversations": Conversation.objects.count(),
        "messages": Message.objects.count(),
        "runs": Run.objects.count(),
        "tool_calls": ToolCall.objects.count(),
        "model_calls": ModelCall.objects.count(),
        "heavy": owners.get("heavy", 0),
        "light": owners.get("light", 0),
        "member0": owners.get("member0", 0),
    }


def stored_bytes(run: int) -> tuple[int, int]:
    """Bytes a run's model calls keep, every column's value as stored, and how many calls."""
    from django.db import connection

    from chat.models import ModelCall

    meta = ModelCall._meta
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in meta.concrete_fields if field.column)
    run_column = quote(ModelCall.run.field.column)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns} FROM {quote(meta.db_table)} WHERE {run_column} = %s", [run]
        )
        rows = cursor.fetchall()
    return sum(_size(value) for row in rows for value in row), len(rows)


def _size(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if isinstance(value, dict | list):
        return len(json.dumps(value, separators=(",", ":")).encode())
    return len(str(value).encode())


def sessions() -> dict[str, Any]:
    """The build's ids, a session cookie for each test user, the row counts and the stored bytes
    per model call of the long conversation's first and last turn (the database may be reused)."""
    _setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from chat.models import Run

    with connection.cursor() as cursor:
        cursor.execute("SELECT info FROM bench_data_info")
        info = json.loads(cursor.fetchone()[0])
    turns = list(Run.objects.filter(conversation_id=info["long_conversation"]).order_by("pk"))
    stored = {}
    for name, turn in (("first", 1), ("last", len(turns))):
        size, calls = stored_bytes(turns[turn - 1].pk)
        stored[name] = {"turn": turn, "bytes": size, "calls": calls, "per_call": size / calls}

    cookies = {}
    for name in ("light", "heavy", "staff"):
        client = Client()
        client.force_login(get_user_model().objects.get(username=name))
        cookies[name] = client.cookies["sessionid"].value
    return {**info, "sessions": cookies, "counts": counts(), "stored": stored}


def main() -> None:
    parser = argparse.ArgumentParser(description="Build the bench --data database.")
    parser.add_argument("step", choices=["build", "sessions"])
    parser.add_argument("--base-url", default="")
    parser.add_argument("--conversations", type=int, default=5000)
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--long-turns", type=int, default=300)
    args = parser.parse_args()
    if args.step == "build":
        build(args.base_url, args.conversations, args.messages, args.long_turns)
    result = sessions()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
