"""The full-text index search reads (chat.search_index), one kind per database.

PostgreSQL: a stored generated tsvector on messages (text weighted A, the names of its tool
calls B) and on conversations (title), each with a GIN index. SQLite: FTS5 tables over the same
text, kept in step by triggers. Both read text with punctuation turned into spaces and the
'simple' / unicode61 rules (lower case, accents kept), so the two split words alike. Existing
rows are indexed here. Two plain indexes serve the orders lists and searches read in.
"""

from typing import Any

from django.db import migrations

INDEXED_CHARS = 100_000
"""Characters of a message the index reads: a tsvector holds at most 1 MB."""


def _words(sql: str) -> str:
    return f"to_tsvector('simple', regexp_replace({sql}, '[^[:alnum:]]+', ' ', 'g'))"


_CONTENT = f"left(coalesce(content, ''), {INDEXED_CHARS})"
_TOOL_NAMES = "jsonb_path_query_array(tool_calls, '$[*].function.name')::text"
_MESSAGE_VECTOR = f"setweight({_words(_CONTENT)}, 'A') || setweight({_words(_TOOL_NAMES)}, 'B')"

_ORDERED = [
    (
        # A user's conversations newest first: a search walks them and stops at a page's end.
        "CREATE INDEX chat_conversation_owner_recent "
        "ON chat_conversation (owner_id, updated_at DESC, id DESC)",
        "DROP INDEX IF EXISTS chat_conversation_owner_recent",
    ),
    (
        # Messages newest first, the admin's order: its list reads a page, not the table.
        "CREATE INDEX chat_message_recent ON chat_message (created_at DESC, id DESC)",
        "DROP INDEX IF EXISTS chat_message_recent",
    ),
]

POSTGRES = [
    (
        f"ALTER TABLE chat_message ADD COLUMN search_vector tsvector "
        f"GENERATED ALWAYS AS ({_MESSAGE_VECTOR}) STORED",
        "ALTER TABLE chat_message DROP COLUMN search_vector",
    ),
    (
        "CREATE INDEX chat_message_search ON chat_message USING gin (search_vector)",
        "DROP INDEX chat_message_search",
    ),
    (
        f"ALTER TABLE chat_conversation ADD COLUMN search_vector tsvector "
        f"GENERATED ALWAYS AS ({_words('title')}) STORED",
        "ALTER TABLE chat_conversation DROP COLUMN search_vector",
    ),
    (
        "CREATE INDEX chat_conversation_search ON chat_conversation USING gin (search_vector)",
        "DROP INDEX chat_conversation_search",
    ),
    *_ORDERED,
    ("ANALYZE chat_message, chat_conversation", ""),
]

_TOKENIZE = "tokenize='unicode61 remove_diacritics 0'"
_SOURCE = "chat_message_search_source"
FTS_MESSAGE = "chat_message_fts"
FTS_TITLE = "chat_conversation_fts"
_ADD_MESSAGE = (
    f"INSERT INTO {FTS_MESSAGE}(rowid, text, tools) "
    f"SELECT id, text, tools FROM {_SOURCE} WHERE id = new.id;"
)
_DROP_MESSAGE = (
    f"INSERT INTO {FTS_MESSAGE}({FTS_MESSAGE}, rowid, text, tools) "
    f"SELECT 'delete', id, text, tools FROM {_SOURCE} WHERE id = old.id;"
)
_ADD_TITLE = f"INSERT INTO {FTS_TITLE}(rowid, title) VALUES (new.id, new.title);"
_DROP_TITLE = (
    f"INSERT INTO {FTS_TITLE}({FTS_TITLE}, rowid, title) VALUES ('delete', old.id, old.title);"
)

REBUILD = [
    f"INSERT INTO {FTS_MESSAGE}({FTS_MESSAGE}) VALUES ('rebuild')",
    f"INSERT INTO {FTS_TITLE}({FTS_TITLE}) VALUES ('rebuild')",
]
"""Index every row again (the tables' FTS5 'rebuild' command)."""

SQLITE = [
    (
        # The text a message's index row holds: the view is its one definition, read by the
        # triggers below (before a change for the old row, after it for the new one). FTS5
        # reads it with table-valued functions barred, hence a recursive CTE over the calls.
        f"CREATE VIEW {_SOURCE} AS SELECT id, substr(content, 1, {INDEXED_CHARS}) AS text, "
        "CASE WHEN json_valid(tool_calls) AND json_type(tool_calls) = 'array' THEN ("
        "WITH RECURSIVE call(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM call "
        "WHERE n + 1 < json_array_length(tool_calls)) SELECT group_concat("
        "json_extract(tool_calls, '$[' || n || '].function.name'), ' ') FROM call"
        ") END AS tools FROM chat_message",
        f"DROP VIEW IF EXISTS {_SOURCE}",
    ),
    (
        f"CREATE VIRTUAL TABLE {FTS_MESSAGE} USING fts5(text, tools, content='{_SOURCE}', "
        f"content_rowid='id', {_TOKENIZE})",
        f"DROP TABLE {FTS_MESSAGE}",
    ),
    (
        f"CREATE TRIGGER chat_message_search_insert AFTER INSERT ON chat_message "
        f"BEGIN {_ADD_MESSAGE} END",
        "DROP TRIGGER IF EXISTS chat_message_search_insert",
    ),
    (
        f"CREATE TRIGGER chat_message_search_delete BEFORE DELETE ON chat_message "
        f"BEGIN {_DROP_MESSAGE} END",
        "DROP TRIGGER IF EXISTS chat_message_search_delete",
    ),
    (
        f"CREATE TRIGGER chat_message_search_before_update BEFORE UPDATE OF content, tool_calls "
        f"ON chat_message BEGIN {_DROP_MESSAGE} END",
        "DROP TRIGGER IF EXISTS chat_message_search_before_update",
    ),
    (
        f"CREATE TRIGGER chat_message_search_after_update AFTER UPDATE OF content, tool_calls "
        f"ON chat_message BEGIN {_ADD_MESSAGE} END",
        "DROP TRIGGER IF EXISTS chat_message_search_after_update",
    ),
    (
        f"CREATE VIRTUAL TABLE {FTS_TITLE} USING fts5(title, content='chat_conversation', "
        f"content_rowid='id', {_TOKENIZE})",
        f"DROP TABLE {FTS_TITLE}",
    ),
    (
        f"CREATE TRIGGER chat_conversation_search_insert AFTER INSERT ON chat_conversation "
        f"BEGIN {_ADD_TITLE} END",
        "DROP TRIGGER IF EXISTS chat_conversation_search_insert",
    ),
    (
        f"CREATE TRIGGER chat_conversation_search_delete AFTER DELETE ON chat_conversation "
        f"BEGIN {_DROP_TITLE} END",
        "DROP TRIGGER IF EXISTS chat_conversation_search_delete",
    ),
    (
        f"CREATE TRIGGER chat_conversation_search_update AFTER UPDATE OF title "
        f"ON chat_conversation BEGIN {_DROP_TITLE} {_ADD_TITLE} END",
        "DROP TRIGGER IF EXISTS chat_conversation_search_update",
    ),
    *_ORDERED,
    *((sql, "") for sql in REBUILD),
]

STATEMENTS = {"postgresql": POSTGRES, "sqlite": SQLITE}


def forward(apps: Any, schema_editor: Any) -> None:
    for sql, _ in STATEMENTS.get(schema_editor.connection.vendor, []):
        schema_editor.execute(sql)


def backward(apps: Any, schema_editor: Any) -> None:
    for _, sql in reversed(STATEMENTS.get(schema_editor.connection.vendor, [])):
        if sql:
            schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0018_model_call_storage"),
    ]

    operations = [migrations.RunPython(forward, backward)]
