"""The statements of a connection and its transactions, apart from any table: how a transaction
begins, ends and is rolled back; the pooler-mode ``BEGIN``; the ``vector`` type lookup of the
driver codec; the pgvector extension of an embedded server; the LangGraph reader's reads.

A leaf: it imports nothing of the package (the engine module, which the statements' own row helpers
depend on through the vector codec, imports it without a cycle)."""

from __future__ import annotations

__all__ = [
    "BEGIN",
    "BEGIN_READ_COMMITTED",
    "COMMIT",
    "CONNECTION_FACTS",
    "CREATE_VECTOR_EXTENSION",
    "LANGGRAPH_HAS_VECTORS",
    "POOLED_BEGIN",
    "ROLLBACK",
    "SET_PLANNER_LOCAL",
    "VECTOR_TYPE_SCHEMA",
    "langgraph_items",
]

BEGIN = "BEGIN"
"""A transaction at the server's default isolation."""

BEGIN_READ_COMMITTED = "BEGIN ISOLATION LEVEL READ COMMITTED"
"""A transaction that sees what the writer holding a lock before it committed, whatever the
server's default isolation (remember's insert and the bulk import)."""

COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"

POOLED_BEGIN = "BEGIN; SET LOCAL max_parallel_workers_per_gather = 0"
"""In transaction pooling, how a statement that would run alone begins its own transaction: the one
server setting of the engine's ``SERVER_SETTINGS`` that still matters there (no statement is
prepared for reuse, so ``plan_cache_mode`` does not) is set in it, in the same round trip."""

SET_PLANNER_LOCAL = "SELECT set_config('max_parallel_workers_per_gather', '0', true)"
""":data:`POOLED_BEGIN`'s setting as a statement of its own: sent with a one-flight read behind a
transaction pooler (``prism_memory.postgres._pipelined``), under the same Sync, so it is local to
that read's implicit transaction (``SET LOCAL`` warns outside a ``BEGIN`` block)."""

CONNECTION_FACTS = (
    "SELECT (SELECT t.oid FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
    "WHERE t.typname = 'vector' AND t.typtype = 'b' ORDER BY n.oid LIMIT 1) AS vector_oid, "
    "current_setting('max_parallel_workers_per_gather') AS parallel_workers"
)
"""What a one-flight reader learns once (``prism_memory.postgres._pipelined``): the oid of
pgvector's ``vector`` type (its binary loader), and the role's or database's
``max_parallel_workers_per_gather`` (``'0'``: a read needs no setting of its own)."""

VECTOR_TYPE_SCHEMA = (
    "SELECT n.nspname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
    "WHERE t.typname = 'vector' AND t.typtype = 'b' ORDER BY n.oid LIMIT 1"
)
"""The schema of pgvector's ``vector`` type, read once per new connection by the driver codec."""

CREATE_VECTOR_EXTENSION = (
    "SET client_min_messages TO warning; CREATE EXTENSION IF NOT EXISTS vector;"
)
"""pgvector in an embedded server's database (psql's input), quietly: no "extension already
exists" notice when a server with --data-dir starts again."""

LANGGRAPH_HAS_VECTORS = "SELECT to_regclass('store_vectors') IS NOT NULL"
"""Whether a LangGraph store database has the vector table of an indexed store."""

_LANGGRAPH_VECTOR = (
    "(SELECT v.embedding FROM store_vectors v WHERE v.prefix = s.prefix AND v.key = s.key "
    "ORDER BY (v.field_name = ANY($1::text[])) DESC, (v.field_name = '$') DESC, "
    "v.field_name LIMIT 1)"
)


def langgraph_items(*, vectors: bool) -> str:
    """Every item of a LangGraph store, ordered by namespace and key, with its vector when the
    store has ``store_vectors`` (``$1``: the text fields whose vector is preferred)."""
    vector = _LANGGRAPH_VECTOR if vectors else "NULL::text"
    return (
        f"SELECT s.prefix, s.key, s.value, s.created_at, {vector} AS embedding "  # noqa: S608
        "FROM store s ORDER BY s.prefix, s.key"
    )
