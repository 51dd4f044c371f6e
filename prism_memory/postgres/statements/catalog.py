# ruff: noqa: S608 - SQL text is built only from validated, quoted identifiers; values are bound.
"""Statements about a schema rather than its rows: catalog inspection (opening a store, ``doctor``,
``stats``, the migrations' checks), maintenance (``ANALYZE``, index repair) and the
transaction-local planner settings of a unit of work. Table names are always quoted
(:func:`~prism_memory.postgres.statements.quote`); values are bound.

One catalog lookup lives elsewhere: where pgvector's ``vector`` type is, which
:func:`prism_memory.postgres._engine.register_vector_codec` reads on every new connection. That
module sits below all others (these statements need :mod:`~prism_memory.postgres.rows`, which needs
the codec), so the lookup stays with the codec rather than close an import cycle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ..tables import Names
from ._base import quote

__all__ = [
    "CUSTOM_PLANS",
    "EMBEDDING_TYPE",
    "EMBEDDING_TYPMOD",
    "INDEX_NAMES",
    "INVALID_INDEXES",
    "PRIMARY_LSN",
    "RELATION_EXISTS",
    "RELATION_SIZE",
    "REPLAYED_LSN",
    "ROLE_SERIAL_PLANS",
    "SCHEMA_TABLES",
    "VECTOR_VERSION",
    "VERSION_TABLES",
    "SchemaSql",
    "recorded_revisions",
]

PRIMARY_LSN: Final = "SELECT pg_current_wal_insert_lsn()"
"""The primary's WAL position now: past the commit of every transaction that has returned."""

REPLAYED_LSN: Final = (
    "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
    "ELSE pg_current_wal_lsn() END"
)
"""How far a replica has replayed the primary's WAL (a server that is no replica -- a promoted
one -- has everything it wrote)."""

RELATION_EXISTS: Final = "SELECT to_regclass(:name) IS NOT NULL"
"""Whether the (quoted, qualified) relation ``:name`` exists."""

SCHEMA_TABLES: Final = (
    "SELECT c.relname FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = :schema AND c.relname = ANY(CAST(:names AS text[])) "
    "AND c.relkind IN ('r', 'p')"
)
"""Those of the tables ``:names`` that exist in ``:schema``."""

EMBEDDING_TYPMOD: Final = (
    "SELECT a.atttypmod FROM pg_attribute a WHERE a.attrelid = to_regclass(:relation) "
    "AND a.attname = 'embedding' AND NOT a.attisdropped"
)
"""``atttypmod`` of ``:relation``'s ``embedding`` column: its pinned width when positive."""

EMBEDDING_TYPE: Final = (
    "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
    "WHERE attrelid = to_regclass(:name) AND attname = 'embedding' AND NOT attisdropped"
)
"""The type of ``:name``'s ``embedding`` column as written (``vector(384)``, ``vector``)."""

VECTOR_VERSION: Final = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
"""The installed pgvector version, or no row."""

ROLE_SERIAL_PLANS: Final = (
    "SELECT EXISTS (SELECT 1 FROM pg_db_role_setting s, unnest(s.setconfig) AS c(setting) "
    "WHERE s.setrole IN (0, (SELECT oid FROM pg_roles WHERE rolname = current_user)) "
    "AND s.setdatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database())) "
    "AND c.setting = 'max_parallel_workers_per_gather=0')"
)
"""Whether the connected role or the database carries ``max_parallel_workers_per_gather = 0``
(``ALTER ROLE … SET`` / ``ALTER DATABASE … SET``): then a read behind a transaction pooler needs
no setting of its own (docs/postgres.md, "Behind a connection pooler")."""

VERSION_TABLES: Final = (
    "SELECT n.nspname, c.relname FROM pg_attribute a "
    "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE a.attname = 'version_num' AND NOT a.attisdropped AND c.relkind IN ('r', 'p') "
    "AND a.atttypid IN ('varchar'::regtype, 'text'::regtype) "
    "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
    "AND has_table_privilege(c.oid, 'SELECT') ORDER BY 1, 2"
)
"""Every readable table with a ``version_num`` column: Alembic version tables, a host's too."""


def recorded_revisions(schema: str, table: str) -> str:
    """Which of the revision ids ``:ids`` the version table ``schema.table`` records."""
    return (
        f"SELECT version_num FROM {quote(schema)}.{quote(table)} "
        "WHERE version_num = ANY(CAST(:ids AS text[])) ORDER BY 1"
    )


INDEX_NAMES: Final = "SELECT indexname FROM pg_indexes WHERE schemaname = :schema"
"""The names of every index in ``:schema``."""

INVALID_INDEXES: Final = """
SELECT c.relname
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_class t ON t.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = :schema
   AND t.relname = ANY(:tables)
   AND NOT i.indisvalid
   AND NOT EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.index_relid = c.oid)
 ORDER BY 1
"""
"""Indexes of prism_memory's tables left INVALID by a failed ``CREATE INDEX CONCURRENTLY`` (a
crashed or terminated server process, a cancelled build) -- not one still being built."""

RELATION_SIZE: Final = "SELECT coalesce(pg_total_relation_size(to_regclass(:n)), 0)"
"""The on-disk size of relation ``:n`` with its indexes and TOAST, 0 when it does not exist."""

CUSTOM_PLANS: Final = (
    "SELECT set_config('plan_cache_mode', 'force_custom_plan', true), "
    "set_config('max_parallel_workers_per_gather', '0', true)"
)
"""For the rest of the transaction: plan every statement for its values, without parallel
workers (a unit of work on a host's engine, which does not set them per connection)."""


@dataclass(frozen=True)
class SchemaSql:
    """The per-schema statements of one table set's :class:`~prism_memory.postgres.tables.Names`."""

    names: Names

    def qualified(self, name: str) -> str:
        """``"schema"."name"``."""
        return f"{quote(self.names.schema)}.{quote(name)}"

    @property
    def entries(self) -> str:
        """The entries table, qualified."""
        return self.qualified(self.names.entries)

    @property
    def version_table(self) -> str:
        """prism_memory's own Alembic version table, qualified."""
        return self.qualified(self.names.version_table)

    @property
    def versions(self) -> str:
        """The revisions the version table records."""
        return f"SELECT version_num FROM {self.version_table}"

    @property
    def analyze_entries(self) -> str:
        """Gather the entries table's planner statistics (outside a transaction block)."""
        return f"ANALYZE {self.entries}"

    @property
    def backlog(self) -> str:
        """Pending and failed entries, and when the oldest pending one was written."""
        return (
            "SELECT count(*) FILTER (WHERE status = 'pending') AS pending, "
            "count(*) FILTER (WHERE status = 'failed') AS failed, "
            "min(written_at) FILTER (WHERE status = 'pending') AS oldest "
            f"FROM {self.entries}"
        )

    @property
    def status_counts(self) -> str:
        """Entries per status."""
        return f"SELECT status, count(*) AS n FROM {self.entries} GROUP BY status"

    @property
    def top_tenants(self) -> str:
        """The ``:top`` tenants by entries, with their pending and failed counts."""
        return (
            "SELECT tenant_id, count(*) AS n, "
            "count(*) FILTER (WHERE status = 'pending') AS pending, "
            "count(*) FILTER (WHERE status = 'failed') AS failed "
            f"FROM {self.entries} GROUP BY tenant_id ORDER BY n DESC, tenant_id "
            "LIMIT :top"
        )

    @property
    def tenant_count(self) -> str:
        """How many tenants hold entries."""
        return f"SELECT count(DISTINCT tenant_id) FROM {self.entries}"

    @property
    def working_count(self) -> str:
        """How many working-memory documents there are."""
        return f"SELECT count(*) FROM {self.qualified(self.names.working)}"

    def drop_index(self, index: str) -> str:
        """Drop ``index`` without blocking writers (autocommit)."""
        return f"DROP INDEX CONCURRENTLY IF EXISTS {self.qualified(index)}"

    def reindex(self, index: str) -> str:
        """Rebuild ``index`` without blocking writers (autocommit)."""
        return f"REINDEX INDEX CONCURRENTLY {self.qualified(index)}"
