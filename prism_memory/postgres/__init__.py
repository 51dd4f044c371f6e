"""PostgreSQL + pgvector backend of prism_memory.

* :func:`create_postgres_memory_stores` -- the vector and working stores of one schema;
* :func:`create_postgres_vector_store` -- the vector store alone;
* :func:`build_memory_ddl` / :func:`build_vector_search_ddl` -- the SQL the Alembic revisions emit,
  for hosts who review DDL before running it;
* :mod:`prism_memory.postgres.migrate` -- run the revisions (programmatically or from the command
  line); :mod:`prism_memory.postgres.embedded` -- a throw-away embedded PostgreSQL + pgvector.
"""

from __future__ import annotations

from .store import (
    PostgresMemoryStores,
    PostgresVectorStore,
    PostgresWorkingStore,
    create_postgres_memory_stores,
    create_postgres_vector_store,
)
from .tables import DEFAULT_SCHEMA, DEFAULT_TABLE

__all__ = [
    "PostgresMemoryStores",
    "PostgresVectorStore",
    "PostgresWorkingStore",
    "build_memory_ddl",
    "build_vector_search_ddl",
    "create_postgres_memory_stores",
    "create_postgres_vector_store",
]


def build_memory_ddl(
    *, schema: str = DEFAULT_SCHEMA, table: str = DEFAULT_TABLE, dimension: int | None = None
) -> str:
    """The SQL (Alembic offline mode) that creates the schema of
    :func:`create_postgres_memory_stores`: every table, index and constraint, up to head.

    Nothing connects to a database. Identifiers are validated first
    (:class:`~prism_memory.errors.ConfigurationError`).
    """
    from .migrate import build_ddl

    return build_ddl(schema=schema, table=table, dimension=dimension)


def build_vector_search_ddl(
    *, schema: str = DEFAULT_SCHEMA, table: str = DEFAULT_TABLE, dimension: int | None = None
) -> str:
    """The SQL that creates the schema of :func:`create_postgres_vector_store`.

    The standalone vector store runs the same revisions as the memory stores (one owner of the
    schema), so this is the same script as :func:`build_memory_ddl`.
    """
    return build_memory_ddl(schema=schema, table=table, dimension=dimension)
