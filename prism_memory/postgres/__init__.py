"""PostgreSQL + pgvector backend of prism_memory.

* :func:`create_postgres_memory_stores` -- the vector and working stores of one schema;
* :func:`create_postgres_vector_store` -- the vector store alone;
* :func:`build_memory_ddl` -- the SQL the Alembic revisions emit, for hosts who review DDL before
  running it; :func:`build_vector_search_ddl` -- only its search index (the ``text_tsv`` GIN);
* :mod:`prism_memory.postgres.migrate` -- run the revisions (programmatically or from the command
  line);
* :func:`start_embedded_postgres` -- a throw-away embedded PostgreSQL + pgvector for demos and
  tests (the ``postgres-embedded`` extra; :mod:`prism_memory.postgres.embedded`).
"""

from __future__ import annotations

from .embedded import EmbeddedPostgres, start_embedded_postgres
from .factories import (
    PostgresMemoryStores,
    create_postgres_memory_stores,
    create_postgres_vector_store,
)
from .store import PostgresVectorStore
from .tables import DEFAULT_SCHEMA, DEFAULT_TABLE
from .working_store import PostgresWorkingStore

__all__ = [
    "EmbeddedPostgres",
    "PostgresMemoryStores",
    "PostgresVectorStore",
    "PostgresWorkingStore",
    "build_memory_ddl",
    "build_vector_search_ddl",
    "create_postgres_memory_stores",
    "create_postgres_vector_store",
    "start_embedded_postgres",
]


def build_memory_ddl(
    *, schema: str = DEFAULT_SCHEMA, table: str = DEFAULT_TABLE, dimension: int | None = None
) -> str:
    """The full SQL (Alembic offline mode) that creates the schema of
    :func:`create_postgres_memory_stores` from nothing: every revision up to head.

    In order: ``CREATE EXTENSION IF NOT EXISTS vector``, the schema, the six tables with their
    primary keys and checks, every index of ``prism_memory_0001`` (scope B-tree, pending partial
    index, lineage GIN, ``text_tsv`` GIN, invalidation and ACL B-trees), then -- only when
    ``dimension`` is pinned and at most 2,000 -- the entries' HNSW index of ``prism_memory_0002``
    (``CREATE INDEX CONCURRENTLY`` in its own autocommit block; ``prism_memory_0010`` drops it
    again, ``DROP INDEX CONCURRENTLY``, since no query reads it), the RAG chunks table of
    ``prism_memory_0006`` (with its ``text_tsv`` GIN and, when pinned, its own HNSW index) and the
    source-ACL key rebuilt per RAG scope, and the version-table bookkeeping
    (``<table>_alembic_version``) throughout. A superset of :func:`build_vector_search_ddl`.

    Nothing connects to a database. Identifiers are validated first
    (:class:`~prism_memory.errors.ConfigurationError`).
    """
    from .migrate import build_ddl

    return build_ddl(schema=schema, table=table, dimension=dimension)


def build_vector_search_ddl(
    *, schema: str = DEFAULT_SCHEMA, table: str = DEFAULT_TABLE, dimension: int | None = None
) -> str:
    """Only the search index of the entries table, the statement exactly as
    :func:`build_memory_ddl` contains it:
    ``CREATE INDEX <table>_text_tsv_gin ON <schema>.<table> USING gin (text_tsv)`` -- the lexical
    leg (revision ``prism_memory_0001``). The entries table has no HNSW index at head (memory recall
    is the exact per-scope path; ``prism_memory_0010`` drops the one ``prism_memory_0002`` built),
    whatever ``dimension`` is.

    It does not create the tables (nor the ``text_tsv`` column, which is part of them), the scope and pending B-trees, the lineage GIN index (it serves lineage cascades, not
    search) or the version table, and it holds no ``BEGIN``/``COMMIT``. It is for review -- what search adds to a schema and
    what it costs to build -- not a second way to migrate: the revisions own the schema.
    """
    from .migrate import build_search_index_ddl

    return build_search_index_ddl(schema=schema, table=table, dimension=dimension)
