"""The PostgreSQL schema of prism_memory, as SQLAlchemy metadata.

The host chooses the schema and the base table name at run time, so the tables are built by
:func:`build_metadata` (cached per ``(schema, table, dimension)``) rather than declared once at import.
The Alembic revisions in ``migrations/versions`` create exactly these objects; ``alembic check``
(see ``tests/migrations``) proves the two agree.

Every primary key starts with ``tenant_id`` so the schema can be distributed by tenant (Citus).

Tables, for a base name ``t``:

* ``t`` -- semantic-memory entries, their vectors and the indexing ledger;
* ``t_invalidation`` -- lineage tombstones (query-time indexed ``NOT EXISTS``);
* ``t_share_grant`` -- parent -> child thread share grants;
* ``t_rag_source_acl`` -- RAG source grants to principals and groups, per RAG scope;
* ``t_rag_scope_generations`` -- the current generation of each RAG scope;
* ``t_rag_chunks`` -- RAG document chunks by scope, generation and source, with their vectors
  and the model that made each (revision ``prism_memory_0012``);
* ``t_working`` -- versioned working-memory documents;
* ``t_generations`` -- the registry of vector generations (one row per embedding model, at most
  one active) and ``t_vectors`` -- a shadow generation's vectors, one per entry and model
  (revision ``prism_memory_0011``).

Each table set also carries typed ORM classes mapped onto these same ``Table`` objects
(``tables.orm.Entry``, ``tables.orm.ShareGrant``, ...; see :mod:`prism_memory.postgres.orm`), so the
ORM adds no metadata of its own.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from .._defaults import DEFAULT_SCHEMA, DEFAULT_TABLE
from ._column_types import BinaryVector, entry_columns, timestamp_column
from ._names import (
    MAX_DIMENSION,
    MAX_HNSW_DIMENSION,
    Names,
    names_for,
    validate_dimension,
    validate_identifier,
)
from ._rag_tables import rag_tables
from .orm import PrismModels, map_models

__all__ = [
    "DEFAULT_SCHEMA",
    "DEFAULT_TABLE",
    "LINEAGE_SOURCE_IDS",
    "MAX_DIMENSION",
    "MAX_HNSW_DIMENSION",
    "RESOURCE_SHARED",
    "BinaryVector",
    "Names",
    "PrismTables",
    "build_metadata",
    "names_for",
    "validate_dimension",
    "validate_identifier",
]


LINEAGE_SOURCE_IDS = "((metadata -> '_lineage'::text) -> 'sourceIds'::text)"
"""The lineage source-id array inside ``metadata``, spelled as PostgreSQL prints it back.

The GIN index is declared on this exact expression and queries use it verbatim, so the planner
matches them.
"""


RESOURCE_SHARED = "(consent_scope <> 'thread'::text)"
"""Rows that travel beyond their thread (consent scope ``user`` or ``profile``), spelled as
PostgreSQL prints it back; the partial index and the resource-wide query use it verbatim."""


@dataclass(frozen=True, slots=True)
class PrismTables:
    """The metadata, the tables and the ORM classes of one ``(schema, table, dimension)``.

    ``orm`` holds one mapped class per table (``orm.Entry``, ``orm.Tombstone``, ``orm.ShareGrant``,
    ``orm.RagSourceAcl``, ``orm.RagScopeGeneration``, ``orm.RagChunk``, ``orm.WorkingMemory``), each mapping the
    ``Table`` beside it here (``tables.orm.ShareGrant.__table__ is tables.share_grant``).
    """

    names: Names
    dimension: int | None
    metadata: MetaData
    entries: Table
    invalidation: Table
    share_grant: Table
    rag_source_acl: Table
    rag_scope_generations: Table
    rag_chunks: Table
    working: Table
    generations: Table
    vectors: Table
    orm: PrismModels


@functools.lru_cache(maxsize=64)
def build_metadata(
    schema: str = DEFAULT_SCHEMA, table: str = DEFAULT_TABLE, dimension: int | None = None
) -> PrismTables:
    """Build (once per arguments) the SQLAlchemy metadata of the prism_memory schema.

    ``dimension`` pins ``embedding`` to ``vector(dimension)`` (both tables) and adds the RAG
    chunks' HNSW index (``vector_cosine_ops``, up to 2,000 dimensions); unpinned, the columns are
    plain ``vector`` and there is no HNSW index. The entries table never has one: no memory query
    reads it.
    The ORM classes (``.orm``) are mapped here too, once per arguments, onto these tables.
    """
    names = names_for(schema, table)
    dimension = validate_dimension(dimension)
    metadata = MetaData(schema=schema)

    entries = Table(
        names.entries,
        metadata,
        *entry_columns(dimension),
        PrimaryKeyConstraint(
            "tenant_id", "resource_id", "thread_id", "id", name=f"{names.entries}_pkey"
        ),
        CheckConstraint(
            "status IN ('pending', 'indexed', 'failed')", name=f"{names.entries}_status_check"
        ),
        # An expression index must be declared inside the table to be bound to it.
        Index(names.ix_lineage, text(LINEAGE_SOURCE_IDS), postgresql_using="gin"),
    )
    Index(
        names.ix_scope,
        entries.c.tenant_id,
        entries.c.resource_id,
        entries.c.thread_id,
        entries.c.sequence,
    )
    Index(
        names.ix_pending,
        entries.c.sequence,
        entries.c.id,
        postgresql_where=text("status = 'pending'::text"),
    )
    # The service worker's turns: which tenants have pending rows, and one tenant's oldest rows
    # (revision prism_memory_0007).
    Index(
        names.ix_pending_tenant,
        entries.c.tenant_id,
        entries.c.sequence,
        entries.c.id,
        postgresql_where=text("status = 'pending'::text"),
    )
    # A memory's start-up claim and a queue's per-thread claims probe one thread's pending rows
    # (nothing, usually: found at once, whatever the thread's size or other threads' backlog);
    # closing a queue releases its leases without a table scan (revision prism_memory_0008).
    Index(
        names.ix_pending_scope,
        entries.c.tenant_id,
        entries.c.resource_id,
        entries.c.thread_id,
        entries.c.sequence,
        entries.c.id,
        postgresql_where=text("status = 'pending'::text"),
    )
    Index(
        names.ix_claimed,
        entries.c.claimed_by,
        postgresql_where=text("claimed_by IS NOT NULL"),
    )
    Index(names.ix_tsv, entries.c.text_tsv, postgresql_using="gin")
    # Resource-wide recall: the user/profile-scoped entries of every thread of a tenant + resource.
    Index(
        names.ix_resource_shared,
        entries.c.tenant_id,
        entries.c.resource_id,
        entries.c.sequence,
        postgresql_where=text(RESOURCE_SHARED),
    )
    # No ANN index on the entries: memory recall is always the exact per-scope path (a thread's
    # B-tree range, or the resource's travelling rows), so an HNSW graph here was read by no query
    # and cost every write its maintenance (revision prism_memory_0010 drops the one 0002 built).

    invalidation = Table(
        names.invalidation,
        metadata,
        Column("tenant_id", Text, nullable=False),
        Column("resource_id", Text, nullable=False),
        Column("thread_id", Text, nullable=False),
        Column("entry_id", Text, nullable=False),
        Column("cause_id", Text, nullable=False),
        Column("reason", Text, nullable=False),
        timestamp_column("created_at"),
        PrimaryKeyConstraint(
            "tenant_id",
            "resource_id",
            "thread_id",
            "entry_id",
            "cause_id",
            "reason",
            name=f"{names.invalidation}_pkey",
        ),
    )
    Index(
        names.ix_invalidation_cause,
        invalidation.c.tenant_id,
        invalidation.c.resource_id,
        invalidation.c.thread_id,
        invalidation.c.cause_id,
    )

    share_grant = Table(
        names.share_grant,
        metadata,
        Column("tenant_id", Text, nullable=False),
        Column("resource_id", Text, nullable=False),
        Column("parent_thread_id", Text, nullable=False),
        Column("child_thread_id", Text, nullable=False),
        Column("source_ids", ARRAY(Text), nullable=False),
        timestamp_column("created_at"),
        timestamp_column("expires_at", nullable=True),
        PrimaryKeyConstraint(
            "tenant_id",
            "resource_id",
            "parent_thread_id",
            "child_thread_id",
            name=f"{names.share_grant}_pkey",
        ),
    )

    rag_source_acl, rag_scope_generations, rag_chunks = rag_tables(metadata, names, dimension)

    working = Table(
        names.working,
        metadata,
        Column("tenant_id", Text, nullable=False),
        Column("resource_id", Text, nullable=False),
        Column("thread_key", Text, nullable=False),
        Column("version", Integer, nullable=False),
        Column("data", JSONB, nullable=False),
        timestamp_column("updated_at"),
        PrimaryKeyConstraint(
            "tenant_id", "resource_id", "thread_key", name=f"{names.working}_pkey"
        ),
    )

    generations, vectors = _generation_tables(metadata, names)
    return PrismTables(
        names=names,
        dimension=dimension,
        metadata=metadata,
        entries=entries,
        invalidation=invalidation,
        share_grant=share_grant,
        rag_source_acl=rag_source_acl,
        rag_scope_generations=rag_scope_generations,
        rag_chunks=rag_chunks,
        working=working,
        generations=generations,
        vectors=vectors,
        orm=map_models(
            metadata,
            entries=entries,
            invalidation=invalidation,
            share_grant=share_grant,
            rag_source_acl=rag_source_acl,
            rag_scope_generations=rag_scope_generations,
            rag_chunks=rag_chunks,
            working=working,
        ),
    )


def _generation_tables(metadata: MetaData, names: Names) -> tuple[Table, Table]:
    """Revision ``prism_memory_0011``: the generations (at most one active) and a shadow
    generation's vectors by entry and model, at the revision they embed (``embedding`` NULL: only
    leased); deleting an entry or a generation deletes its vectors (``CASCADE``)."""
    entry_key = ["tenant_id", "resource_id", "thread_id", "entry_id"]
    generations = Table(
        names.generations,
        metadata,
        Column("model", Text, nullable=False),
        Column("width", Integer, nullable=False),
        Column("role", Text, nullable=False),
        Column("active", Boolean, nullable=False),
        timestamp_column("started_at"),
        timestamp_column("switched_at", nullable=True),
        PrimaryKeyConstraint("model", name=f"{names.generations}_pkey"),
        CheckConstraint("role IN ('primary', 'shadow')", name=f"{names.generations}_role_check"),
    )
    active = text("active")
    Index(names.ix_generations_active, generations.c.active, unique=True, postgresql_where=active)
    vectors = Table(
        names.vectors,
        metadata,
        Column("tenant_id", Text, nullable=False),
        Column("resource_id", Text, nullable=False),
        Column("thread_id", Text, nullable=False),
        Column("entry_id", Text, nullable=False),
        Column("model", Text, nullable=False),
        Column("revision", Integer, nullable=False),
        Column("embedding", BinaryVector(None), nullable=True),
        Column("claimed_by", Text, nullable=True),
        timestamp_column("claimed_until", nullable=True),
        PrimaryKeyConstraint(*entry_key, "model", name=f"{names.vectors}_pkey"),
        ForeignKeyConstraint(
            entry_key,
            [f"{names.schema}.{names.entries}.{c}" for c in (*entry_key[:3], "id")],
            name=f"{names.vectors}_entry_fkey",
            ondelete="CASCADE",
        ),
        ForeignKeyConstraint(
            ["model"],
            [f"{names.schema}.{names.generations}.model"],
            name=f"{names.vectors}_model_fkey",
            ondelete="CASCADE",
        ),
    )
    return generations, vectors
