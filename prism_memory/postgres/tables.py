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
import re
from dataclasses import dataclass
from typing import Any

from pgvector.sqlalchemy import VECTOR
from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Double,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR
from sqlalchemy.engine import Dialect

from .._defaults import DEFAULT_SCHEMA, DEFAULT_TABLE
from ..errors import ConfigurationError
from .orm import PrismModels, map_models

__all__ = [
    "DEFAULT_SCHEMA",
    "DEFAULT_TABLE",
    "LINEAGE_SOURCE_IDS",
    "RESOURCE_SHARED",
    "BinaryVector",
    "Names",
    "PrismTables",
    "build_metadata",
    "names_for",
    "validate_dimension",
    "validate_identifier",
]


_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_MAX_IDENTIFIER = 63
MAX_DIMENSION = 16000
"""pgvector's limit for a ``vector`` column (HNSW indexes up to 2,000)."""
MAX_HNSW_DIMENSION = 2000

LINEAGE_SOURCE_IDS = "((metadata -> '_lineage'::text) -> 'sourceIds'::text)"
"""The lineage source-id array inside ``metadata``, spelled as PostgreSQL prints it back.

The GIN index is declared on this exact expression and queries use it verbatim, so the planner
matches them.
"""


RESOURCE_SHARED = "(consent_scope <> 'thread'::text)"
"""Rows that travel beyond their thread (consent scope ``user`` or ``profile``), spelled as
PostgreSQL prints it back; the partial index and the resource-wide query use it verbatim."""


def validate_identifier(value: object, what: str) -> str:
    """Return ``value`` if it is a safe lower-case SQL identifier, else raise ``ConfigurationError``.

    Only ``[a-z_][a-z0-9_]*`` up to 63 characters is accepted; such names never need escaping, and
    they are quoted anyway wherever they reach SQL.
    """
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise ConfigurationError(
            f"{what} must match {_IDENTIFIER.pattern} (lower-case letters, digits, underscores, "
            f"at most {_MAX_IDENTIFIER} characters); got {value!r}"
        )
    return value


def validate_dimension(value: object) -> int | None:
    """Return ``value`` if it is ``None`` or a usable vector width, else raise ``ConfigurationError``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DIMENSION:
        raise ConfigurationError(
            f"dimension must be None or an integer in [1, {MAX_DIMENSION}]; got {value!r}"
        )
    return value


@dataclass(frozen=True, slots=True)
class Names:
    """Every database object name derived from the host's ``schema`` and ``table``."""

    schema: str
    table: str
    entries: str
    invalidation: str
    share_grant: str
    rag_source_acl: str
    rag_scope_generations: str
    rag_chunks: str
    working: str
    generations: str
    vectors: str
    version_table: str
    ix_scope: str
    ix_pending: str
    ix_pending_tenant: str
    ix_pending_scope: str
    ix_claimed: str
    ix_lineage: str
    ix_tsv: str
    ix_hnsw: str
    ix_invalidation_cause: str
    ix_acl_principal: str
    ix_rag_chunks_tsv: str
    ix_rag_chunks_hnsw: str
    ix_resource_shared: str
    ix_generations_active: str

    def all_identifiers(self) -> tuple[str, ...]:
        """Every derived name, constraint names included (each must fit in 63 characters)."""
        plain = tuple(getattr(self, name) for name in self.__slots__)
        constraints = (
            *(f"{name}_pkey" for name in self.tables),
            f"{self.entries}_status_check",
            f"{self.rag_source_acl}_kind_check",
            f"{self.generations}_role_check",
            f"{self.vectors}_entry_fkey",
            f"{self.vectors}_model_fkey",
        )
        return plain + constraints

    @property
    def tables(self) -> tuple[str, ...]:
        """The table names the revisions own (the version table excluded)."""
        return (
            self.entries,
            self.invalidation,
            self.share_grant,
            self.rag_source_acl,
            self.rag_scope_generations,
            self.rag_chunks,
            self.working,
            self.generations,
            self.vectors,
        )


def names_for(schema: str, table: str) -> Names:
    """Validate ``schema`` and ``table`` and derive every object name from them.

    Raises :class:`~prism_memory.errors.ConfigurationError` before anything touches a database when
    a name is unsafe or a derived name would exceed 63 characters (PostgreSQL would silently
    truncate it).
    """
    validate_identifier(schema, "schema")
    validate_identifier(table, "table")
    names = Names(
        schema=schema,
        table=table,
        entries=table,
        invalidation=f"{table}_invalidation",
        share_grant=f"{table}_share_grant",
        rag_source_acl=f"{table}_rag_source_acl",
        rag_scope_generations=f"{table}_rag_scope_generations",
        rag_chunks=f"{table}_rag_chunks",
        working=f"{table}_working",
        generations=f"{table}_generations",
        vectors=f"{table}_vectors",
        version_table=f"{table}_alembic_version",
        ix_scope=f"{table}_scope_seq_idx",
        ix_pending=f"{table}_pending_idx",
        ix_pending_tenant=f"{table}_pending_tenant_idx",
        ix_pending_scope=f"{table}_pending_scope_idx",
        ix_claimed=f"{table}_claimed_idx",
        ix_lineage=f"{table}_lineage_gin",
        ix_tsv=f"{table}_text_tsv_gin",
        ix_hnsw=f"{table}_embedding_hnsw",
        ix_invalidation_cause=f"{table}_invalidation_cause_idx",
        ix_acl_principal=f"{table}_rag_source_acl_principal_idx",
        ix_rag_chunks_tsv=f"{table}_rag_chunks_tsv_gin",
        ix_rag_chunks_hnsw=f"{table}_rag_chunks_hnsw",
        ix_resource_shared=f"{table}_resource_shared_idx",
        ix_generations_active=f"{table}_generations_active_idx",
    )
    too_long = [name for name in names.all_identifiers() if len(name) > _MAX_IDENTIFIER]
    if too_long:
        longest = max(len(name) - len(table) for name in names.all_identifiers())
        raise ConfigurationError(
            f"table name {table!r} is too long: derived names such as {too_long[0]!r} would exceed "
            f"{_MAX_IDENTIFIER} characters (use at most {_MAX_IDENTIFIER - longest} characters)"
        )
    return names


class BinaryVector(VECTOR):
    """pgvector's ``vector`` column type, without the text conversion.

    pgvector's SQLAlchemy type turns every value into text. prism_memory registers its own asyncpg
    codec of pgvector's binary format on each connection instead (:mod:`prism_memory.postgres._codec`,
    registered by :mod:`prism_memory.postgres._engine`; the one encoder and decoder of the adapter),
    so values pass through untouched: numpy ``float32`` arrays in, numpy ``float32`` arrays out.
    """

    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> None:
        """No conversion: the driver's binary codec encodes numpy arrays."""
        return

    def result_processor(self, dialect: Dialect, coltype: object) -> None:
        """No conversion: the driver's binary codec decodes to numpy arrays."""
        return


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


def _timestamp(name: str, *, nullable: bool = False) -> Column[Any]:
    return Column(name, DateTime(timezone=True), nullable=nullable)


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
        Column("tenant_id", Text, nullable=False),
        Column("resource_id", Text, nullable=False),
        Column("thread_id", Text, nullable=False),
        Column("id", Text, nullable=False),
        Column("text", Text, nullable=False),
        Column("role", Text, nullable=False),
        Column("metadata", JSONB, nullable=False),
        Column("consent_explicit", Boolean, nullable=False),
        Column("consent_source", Text, nullable=False),
        Column("consent_scope", Text, nullable=False),
        Column("consent_visible", Boolean, nullable=False),
        _timestamp("consent_granted_at", nullable=True),
        _timestamp("consent_revoked_at", nullable=True),
        Column("sequence", BigInteger, nullable=False),
        _timestamp("occurred_at"),
        _timestamp("created_at"),
        _timestamp("written_at"),
        Column("importance", Double, nullable=False),
        Column("legal_hold", Boolean, nullable=False),
        Column("status", Text, nullable=False),
        Column("revision", Integer, nullable=False),
        Column("attempts", Integer, nullable=False),
        Column("last_error", Text, nullable=True),
        _timestamp("next_attempt_at", nullable=True),
        Column("claimed_by", Text, nullable=True),
        _timestamp("claimed_until", nullable=True),
        Column("embedding", BinaryVector(dimension), nullable=True),
        Column("embedding_model", Text, nullable=True),
        # Revision prism_memory_0013: the vectors of an entry's windows after the first (NULL:
        # none, the entry fits its embedder's window), written with ``embedding``.
        Column("window_embeddings", ARRAY(BinaryVector(None)), nullable=True),
        # The lexical leg's terms: ``array_to_tsvector`` of prism_memory.lexical.tokenize(text)
        # (distinct terms, no positions) and the number of terms, written by the library with the
        # text, so both backends share one tokenizer (revision prism_memory_0004).
        Column("text_tsv", TSVECTOR, nullable=True),
        Column("term_count", Integer, nullable=False),
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
        _timestamp("created_at"),
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
        _timestamp("created_at"),
        _timestamp("expires_at", nullable=True),
        PrimaryKeyConstraint(
            "tenant_id",
            "resource_id",
            "parent_thread_id",
            "child_thread_id",
            name=f"{names.share_grant}_pkey",
        ),
    )

    rag_source_acl = Table(
        names.rag_source_acl,
        metadata,
        Column("tenant_id", Text, nullable=False),
        Column("scope", Text, nullable=False),
        Column("source_id", Text, nullable=False),
        Column("principal_kind", Text, nullable=False),
        Column("principal_id", Text, nullable=False),
        Column("access_version", BigInteger, nullable=False),
        _timestamp("created_at"),
        PrimaryKeyConstraint(
            "tenant_id",
            "scope",
            "source_id",
            "principal_kind",
            "principal_id",
            name=f"{names.rag_source_acl}_pkey",
        ),
        CheckConstraint(
            "principal_kind IN ('principal', 'group')",
            name=f"{names.rag_source_acl}_kind_check",
        ),
    )
    Index(
        names.ix_acl_principal,
        rag_source_acl.c.tenant_id,
        rag_source_acl.c.scope,
        rag_source_acl.c.principal_kind,
        rag_source_acl.c.principal_id,
        rag_source_acl.c.source_id,
    )

    rag_scope_generations = Table(
        names.rag_scope_generations,
        metadata,
        Column("tenant_id", Text, nullable=False),
        Column("scope", Text, nullable=False),
        Column("generation", BigInteger, nullable=False),
        _timestamp("updated_at"),
        PrimaryKeyConstraint("tenant_id", "scope", name=f"{names.rag_scope_generations}_pkey"),
    )

    # Revision prism_memory_0006: chunks live in a table of their own (not in the entries table),
    # so the RAG corpus gets its own HNSW graph and memory's per-thread scans never wade through it.
    rag_chunks = Table(
        names.rag_chunks,
        metadata,
        Column("tenant_id", Text, nullable=False),
        Column("scope", Text, nullable=False),
        Column("generation", BigInteger, nullable=False),
        Column("source_id", Text, nullable=False),
        Column("chunk_index", Integer, nullable=False),
        Column("text", Text, nullable=False),
        Column("metadata", JSONB, nullable=False),
        Column("digest", Text, nullable=False),
        Column("embedding", BinaryVector(dimension), nullable=False),
        # Written from prism_memory.lexical.tokenize (stems with their positions), not computed by
        # a text-search configuration: every backend counts the same terms.
        Column("text_tsv", TSVECTOR, nullable=False),
        Column("term_count", Integer, nullable=False),
        _timestamp("created_at"),
        # Revision prism_memory_0012: the model that made the vector (NULL: not recorded).
        Column("embedding_model", Text, nullable=True),
        PrimaryKeyConstraint(
            "tenant_id",
            "scope",
            "generation",
            "source_id",
            "chunk_index",
            name=f"{names.rag_chunks}_pkey",
        ),
    )
    Index(names.ix_rag_chunks_tsv, rag_chunks.c.text_tsv, postgresql_using="gin")
    if dimension is not None and dimension <= MAX_HNSW_DIMENSION:
        Index(
            names.ix_rag_chunks_hnsw,
            rag_chunks.c.embedding,
            postgresql_using="hnsw",
            postgresql_ops={"embedding": "vector_cosine_ops"},
        )

    working = Table(
        names.working,
        metadata,
        Column("tenant_id", Text, nullable=False),
        Column("resource_id", Text, nullable=False),
        Column("thread_key", Text, nullable=False),
        Column("version", Integer, nullable=False),
        Column("data", JSONB, nullable=False),
        _timestamp("updated_at"),
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
        _timestamp("started_at"),
        _timestamp("switched_at", nullable=True),
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
        _timestamp("claimed_until", nullable=True),
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
