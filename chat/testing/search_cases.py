"""One table of search cases that both index backends must answer alike: the rows (`build`),
and for each query what it finds (titles, most recent first). Used in the normal test database
(SQLite) and, through `manage.py shell` and `manage.py search`, in a PostgreSQL site."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from chat import agent, transcripts
from chat.models import Conversation
from chat.testing import factories as make
from chat.transcripts import versions

EVERYONE = ""
"""A case's user when it searches every user's conversations (the admin's search)."""


def _said(conversation: Conversation, *messages: agent.ChatMessage | str) -> None:
    roles = ["user", "assistant"]
    values = [
        agent.ChatMessage(role=roles[n % 2], content=item) if isinstance(item, str) else item
        for n, item in enumerate(messages)
    ]
    transcripts.append_messages(conversation, values)


def build() -> None:
    """Users ada and bob and their conversations, last updated in the order made."""
    ada, bob = make.user("ada"), make.user("bob")
    made = []

    pharmacy = make.conversation(ada, "Pharmacy notes")
    _said(pharmacy, "I need more pills for the long trip", "Pick up the pills on Tuesday.")
    made.append(pharmacy)

    weekend = make.conversation(ada, "Weekend plans")
    _said(weekend, "Let us go hiking", "Bring water and good boots.")
    made.append(weekend)

    cafe = make.conversation(ada, "Café crème")
    _said(cafe, "Où est le café?", "Le café est à côté de l'école.")
    made.append(cafe)

    hello = make.conversation(ada, "Привет")
    _said(hello, "Как дела, мир?", "Всё хорошо.")
    made.append(hello)

    operators = make.conversation(ada, "Operators")
    _said(operators, 'Try "NEAR" OR (this) -not *star* col:umn a&b|c!d', "Done.")
    made.append(operators)

    edited = make.conversation(ada, "Edited")
    _said(edited, "What about otters?", "Otters are lovely.")
    versions.archive_from(edited, 0)
    _said(edited, "What about beavers?", "Beavers build dams.")
    made.append(edited)

    tools = make.conversation(ada, "Tools")
    _said(
        tools,
        "look through the cards for me",
        agent.ChatMessage(role="assistant", tool_calls=(make.call("c1", "search_cards"),)),
        agent.ChatMessage(role="tool", tool_call_id="c1", content="card: walrus"),
        agent.ChatMessage(role="assistant", content="Found an aardvark."),
    )
    made.append(tools)

    secret = make.conversation(bob, "Secret plans")
    _said(secret, "the secret is out", "pills for bob")
    made.append(secret)

    start = datetime(2025, 1, 1, tzinfo=UTC)
    for n, conversation in enumerate(made):
        moment = start + timedelta(minutes=n)
        Conversation.objects.filter(pk=conversation.pk).update(updated_at=moment)


@dataclass(frozen=True)
class Case:
    query: str
    user: str
    found: list[str]
    everywhere: bool = False


CASES = [
    # words, each a prefix; every term somewhere in the title or the messages
    Case("pills", "ada", ["Pharmacy notes"]),
    Case("pil", "ada", ["Pharmacy notes"]),
    Case("PILLS tuesday", "ada", ["Pharmacy notes"]),
    Case("pills hiking", "ada", []),
    Case("weekend boots", "ada", ["Weekend plans"]),
    Case("go hik", "ada", ["Weekend plans"]),
    Case("ills", "ada", []),
    # phrases: the exact words in sequence
    Case('"go hiking"', "ada", ["Weekend plans"]),
    Case('"hiking go"', "ada", []),
    Case('"go hik"', "ada", []),
    Case("'long trip'", "ada", ["Pharmacy notes"]),
    # unicode: case folded, accents kept
    Case("ÉCOLE", "ada", ["Café crème"]),
    Case("café", "ada", ["Café crème"]),
    Case("cafe", "ada", []),
    Case("мир", "ada", ["Привет"]),
    Case("ПРИВЕТ", "ada", ["Привет"]),
    # what is an operator to an engine is text here
    Case("NEAR", "ada", ["Operators"]),
    Case("OR this", "ada", ["Operators"]),
    Case("col:umn", "ada", ["Operators"]),
    Case('"a&b|c!d"', "ada", ["Operators"]),
    Case("-not", "ada", ["Operators", "Pharmacy notes"]),
    Case('"-not"', "ada", ["Operators"]),
    Case("*star*", "ada", ["Operators"]),
    Case("NOT pills", "ada", ["Pharmacy notes"]),
    # ownership
    Case("secret", "ada", []),
    Case("secret", "bob", ["Secret plans"]),
    Case("pills", "bob", ["Secret plans"]),
    Case("pills", EVERYONE, ["Secret plans", "Pharmacy notes"], everywhere=True),
    # versions and roles: the sidebar reads what its reader sees, the admin everything
    Case("otters", "ada", []),
    Case("otters", "ada", ["Edited"], everywhere=True),
    Case("beavers", "ada", ["Edited"]),
    Case("walrus", "ada", []),
    Case("walrus", EVERYONE, ["Tools"], everywhere=True),
    Case("aardvark", "ada", ["Tools"]),
    Case("search_cards", "ada", []),
    Case("search_cards", EVERYONE, ["Tools"], everywhere=True),
    Case("cards search", EVERYONE, ["Tools"], everywhere=True),
]

HOSTILE = [
    '"',
    '""',
    "'",
    "*",
    ":",
    "&",
    "|",
    "!",
    "(",
    ")",
    "-",
    "^",
    "+",
    "\\",
    ":*",
    "<->",
    "pills:*A",
    'NEAR("a" "b", 2)',
    "NEAR(",
    "AND",
    "OR",
    "NOT",
    "pills OR",
    "pills AND NOT",
    "text : pills",
    "{text tools}: pills",
    "pills*",
    '"pills',
    "pills'",
    "a'b'c",
    "'';DROP TABLE chat_message;--",
    "x\x00y",
    "\ud800pills",
    "%s %(x)s ?",
    "é" * 300,
]
"""Queries that are operators, quoting or encodings to some engine: each must answer, never
raise."""
