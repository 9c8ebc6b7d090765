"""manage.py search: what the sidebar's search (or the admin's) finds, from a terminal."""

from __future__ import annotations

import json
from html import unescape
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.html import strip_tags

from chat import search
from chat.management.terminal import user_named
from chat.models import Conversation


class Command(BaseCommand):
    help = (
        "Search conversations as the sidebar does: every word (the last letters may be "
        'unfinished) or "quoted phrase" in the title or the text of a message. --user NAME '
        "searches that user's own conversations; --everywhere reads every message of every "
        "version and the tool names, as the admin does (of every user's conversations, or only "
        "NAME's). Several queries may be given; --json prints a list of results, one a query."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queries", nargs="+", metavar="QUERY")
        parser.add_argument("--user", metavar="NAME", help="Only this user's conversations.")
        parser.add_argument(
            "--everywhere",
            action="store_true",
            help="The admin's search: every message, version and tool name.",
        )
        parser.add_argument("--limit", type=int, default=search.LIMIT, metavar="N")
        parser.add_argument("--json", action="store_true", help="Print JSON for scripts.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["limit"] < 1:
            raise CommandError("--limit must be at least 1.")
        if not options["user"] and not options["everywhere"]:
            raise CommandError("Give --user NAME (the sidebar's search) or --everywhere.")
        conversations = Conversation.objects.chats()
        if options["user"]:
            conversations = conversations.for_user(user_named(options["user"]))
        found = [
            _record(
                search.search(
                    conversations,
                    query,
                    limit=options["limit"],
                    everywhere=options["everywhere"],
                )
            )
            for query in options["queries"]
        ]
        if options["json"]:
            self.stdout.write(json.dumps(found, ensure_ascii=False, indent=1))
            return
        for results in found:
            self.stdout.write(f"{results['query']}: {results['summary']}")
            for hit in results["hits"]:
                snippet = unescape(strip_tags(hit["snippet"]))
                self.stdout.write(f"  {hit['id']:>8}  {hit['title_text']}  {snippet}".rstrip())


def _record(results: search.Results) -> dict[str, Any]:
    return {
        "query": results.query,
        "summary": results.summary,
        "more": results.more,
        "hits": [
            {
                "id": hit.conversation.pk,
                "title_text": str(hit.conversation),
                "title": str(hit.title),
                "snippet": str(hit.snippet),
                "message": hit.message,
            }
            for hit in results.hits
        ],
    }
