"""The full-text index behind search, one backend per database (made by migration 0019).

PostgreSQL: a stored tsvector on messages (text weighted A, tool names B) and on
conversations (title), GIN-indexed, ranked with ts_rank. SQLite: FTS5 tables kept in step by
triggers, unranked (a conversation's first matching message gives its snippet). Both split
text into runs of letters and digits, lower-cased, accents kept, so a query finds the same rows
on either.

The query language is the same on both: a word is its tokens in sequence, the last one a prefix
(search as you type); a quoted phrase is its tokens in sequence, exactly. Every token is quoted
for the engine, so no character a person types is ever an operator.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import import_module
from types import ModuleType
from typing import Any, Protocol

from django.db import connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BooleanField, Exists, F, FloatField, Func, OuterRef, Q, QuerySet, Value
from django.db.models.expressions import RawSQL
from django.db.models.sql.compiler import SQLCompiler

from chat.models import Message

TOKEN = re.compile(r"[^\W_]+")
"""A token as both engines see it: a run of letters and digits (punctuation and _ split)."""
MAX_TOKENS = 16
"""Tokens a term keeps: a pasted paragraph is not a phrase anyone is looking for."""


@dataclass(frozen=True)
class Term:
    """One thing every hit contains: a word (`exact` False: its last token is a prefix) or a
    quoted phrase (`exact`: the tokens as typed, in sequence)."""

    text: str
    tokens: tuple[str, ...]
    exact: bool

    @classmethod
    def of(cls, text: str, *, exact: bool) -> Term | None:
        """The term of a word or phrase as typed; None when it has no letter or digit."""
        tokens = tuple(TOKEN.findall(text))[:MAX_TOKENS]
        return cls(text, tokens, exact) if tokens else None

    def key(self) -> tuple[tuple[str, ...], bool]:
        return tuple(token.casefold() for token in self.tokens), self.exact

    def pattern(self) -> str:
        """A regular expression for where this term is in a text (for highlighting): its tokens
        as whole words (the last one completed unless exact), anything but letters and digits
        between them."""
        joined = r"[\W_]+".join(re.escape(token) for token in self.tokens)
        return rf"(?<![^\W_]){joined}" + (r"(?![^\W_])" if self.exact else r"[^\W_]*")


class Backend(Protocol):
    """How one database finds terms. `everywhere` (the admin's view) also reads tool names;
    otherwise only a message's text counts."""

    def messages(self, terms: Sequence[Term], *, everywhere: bool, each: bool = False) -> Q:
        """On messages: those that contain any of `terms`. `each`: tested message by message
        (for a few), never by reading every match of the index first."""

    def titles(self, term: Term) -> Q:
        """On conversations: those whose title contains `term`."""

    def containing(self, messages: QuerySet[Message], *, each: bool = False) -> Q:
        """On conversations: those that have one of `messages`. `each`: tested conversation by
        conversation (for a few), never by reading every match of the index first."""

    def ranked(
        self, messages: QuerySet[Message], terms: Sequence[Term], *, everywhere: bool
    ) -> QuerySet[Message]:
        """`messages` that contain any of `terms`, with `score`: higher is a better match."""


class _OwnColumn(Func):
    """An expression over the stored vector, a column the model does not declare, and a
    tsquery: the row is given by its primary key, whose alias the compiled column carries into
    subqueries too."""

    def as_sql(
        self,
        compiler: SQLCompiler,
        connection: BaseDatabaseWrapper,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> tuple[str, Any]:
        pk, query = self.get_source_expressions()
        sql, params = compiler.compile(query)
        vector = f"{compiler.quote_name(pk.alias)}.search_vector"
        return self.over(vector, f"to_tsquery('simple', {sql})"), params

    def over(self, vector: str, query: str) -> str:
        raise NotImplementedError


class _Matches(_OwnColumn):
    output_field = BooleanField()
    conditional = True

    def __init__(self, *expressions: Any, each: bool = False) -> None:
        super().__init__(*expressions)
        self.each = each

    def over(self, vector: str, query: str) -> str:
        # IS TRUE is no index condition: a few rows tested one by one, where a prefix's every
        # match in the GIN index would cost more than the rows themselves.
        return f"({vector} @@ {query}) IS TRUE" if self.each else f"{vector} @@ {query}"


class _Rank(_OwnColumn):
    output_field = FloatField()

    def over(self, vector: str, query: str) -> str:
        # Normalized by length (1 + log of it), as bm25 weighs a match in a short text above
        # one in a long text.
        return f"ts_rank({vector}, {query}, 1)"


class _EachRow(Exists):
    """EXISTS that PostgreSQL runs for each row, stopping at the first match: OFFSET 0 keeps
    it from turning the subquery into a hash of every match."""

    template = "EXISTS(%(subquery)s OFFSET 0)"


def _quoted(token: str, quote: str) -> str:
    return quote + token.replace(quote, quote * 2) + quote


class Postgres:
    """Full-text search over the stored `search_vector` columns (GIN indexes)."""

    @staticmethod
    def query(terms: Sequence[Term], *, weight: str = "") -> str:
        """The tsquery text of any of `terms`, each token quoted; `weight` limits it to text of
        that weight (A: a message's text)."""

        def lexeme(token: str, prefix: bool) -> str:
            marks = ("*" if prefix else "") + weight
            return _quoted(token.replace("\\", "\\\\"), "'") + (":" + marks if marks else "")

        phrases = []
        for term in terms:
            last = len(term.tokens) - 1
            tokens = [lexeme(t, not term.exact and n == last) for n, t in enumerate(term.tokens)]
            phrases.append("(" + " <-> ".join(tokens) + ")")
        return " | ".join(phrases)

    def _weight(self, everywhere: bool) -> str:
        return "" if everywhere else "A"

    def messages(self, terms: Sequence[Term], *, everywhere: bool, each: bool = False) -> Q:
        query = Value(self.query(terms, weight=self._weight(everywhere)))
        return Q(_Matches(F("pk"), query, each=each))

    def titles(self, term: Term) -> Q:
        return Q(_Matches(F("pk"), Value(self.query([term]))))

    def containing(self, messages: QuerySet[Message], *, each: bool = False) -> Q:
        # Correlated: PostgreSQL chooses per query between testing each conversation (and
        # stopping at a page's end, for a common word) and hashing the index's matches (a rare
        # one); `each` leaves it no choice.
        kind = _EachRow if each else Exists
        return Q(kind(messages.filter(conversation=OuterRef("pk"))))

    def ranked(
        self, messages: QuerySet[Message], terms: Sequence[Term], *, everywhere: bool
    ) -> QuerySet[Message]:
        query = self.query(terms, weight=self._weight(everywhere))
        return messages.filter(self.messages(terms, everywhere=everywhere, each=True)).annotate(
            score=_Rank(F("pk"), Value(query))
        )


class Sqlite:
    """FTS5 tables `chat_message_fts` (text, tools) and `chat_conversation_fts` (title)."""

    @staticmethod
    def query(terms: Sequence[Term], *, column: str = "") -> str:
        """The FTS5 match expression of any of `terms`, each phrase quoted; `column` limits it
        to one column."""
        phrases = []
        for term in terms:
            phrase = _quoted(" ".join(term.tokens), '"') + ("" if term.exact else " *")
            phrases.append(f"{column} : {phrase}" if column else phrase)
        return " OR ".join(phrases)

    def _column(self, everywhere: bool) -> str:
        return "" if everywhere else "text"

    def messages(self, terms: Sequence[Term], *, everywhere: bool, each: bool = False) -> Q:
        match = self.query(terms, column=self._column(everywhere))
        sql = "SELECT rowid FROM chat_message_fts WHERE chat_message_fts MATCH %s"
        return Q(pk__in=RawSQL(sql, [match]))

    def titles(self, term: Term) -> Q:
        sql = "SELECT rowid FROM chat_conversation_fts WHERE chat_conversation_fts MATCH %s"
        return Q(pk__in=RawSQL(sql, [self.query([term])]))

    def containing(self, messages: QuerySet[Message], *, each: bool = False) -> Q:
        # Uncorrelated: SQLite reads the index's matches once for the whole query.
        return Q(pk__in=messages.values("conversation_id"))

    def ranked(
        self, messages: QuerySet[Message], terms: Sequence[Term], *, everywhere: bool
    ) -> QuerySet[Message]:
        # Unranked: bm25 for a few rows costs FTS5 a pass over every match of a common word
        # per row; the first matching message (by its place) gives the snippet.
        found = messages.filter(self.messages(terms, everywhere=everywhere))
        return found.annotate(score=Value(0.0, output_field=FloatField()))


BACKENDS: dict[str, Backend] = {"postgresql": Postgres(), "sqlite": Sqlite()}


def backend() -> Backend:
    """The backend of the database in use; the others have no index (no search)."""
    return BACKENDS[connection.vendor]


_KEPT_IN_STEP = ("CREATE VIEW", "CREATE TRIGGER")
"""What keeps SQLite's index in step with the tables (one view, the triggers)."""


def _sqlite_schema(using: str) -> tuple[Any, ModuleType, set[str]] | None:
    """The database, migration 0019 (its statements) and the names in SQLite's schema; None
    on another database or before 0019 is applied."""
    database = connections[using]
    if database.vendor != "sqlite":
        return None
    made = import_module("chat.migrations.0019_search_index")
    with database.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master")
        present = {row[0] for row in cursor.fetchall()}
    return (database, made, present) if made.FTS_MESSAGE in present else None


def set_aside_sqlite_index(using: str, plan: Sequence[Any] | None = None, **_: Any) -> None:
    """Before migrations run on SQLite (`pre_migrate`): drop the view and triggers that keep
    the index in step. SQLite alters a table by copying it, and refuses to rename the copy
    while a view names the table; `restore_sqlite_index` makes them again afterwards."""
    found = _sqlite_schema(using) if plan else None
    if found is None:
        return
    database, made, present = found
    with database.cursor() as cursor:
        for create, drop in reversed(made.SQLITE):
            if create.startswith(_KEPT_IN_STEP) and create.split()[2] in present:
                cursor.execute(drop)


def restore_sqlite_index(using: str, **_: Any) -> None:
    """After migrations on SQLite (`post_migrate`): make again each view, trigger and index of
    migration 0019 that is missing, from its own statements, and rebuild the index when it may
    have missed writes.

    Besides `set_aside_sqlite_index`, a table's copy drops the table's triggers and the
    indexes made by SQL: without this a migration that touches messages or conversations
    would silently stop indexing them.
    """
    found = _sqlite_schema(using)
    if found is None:
        return
    database, made, present = found
    creates = [
        create for create, _ in made.SQLITE if create.startswith(("CREATE INDEX", *_KEPT_IN_STEP))
    ]
    missing = [create for create in creates if create.split()[2] not in present]
    with database.cursor() as cursor:
        for create in missing:
            cursor.execute(create)
        if any(create.startswith(_KEPT_IN_STEP) for create in missing):
            for sql in made.REBUILD:
                cursor.execute(sql)
