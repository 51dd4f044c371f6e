"""The RAG tables of one table set: source grants, scope generations and chunks.

Built by :func:`~prism_memory.postgres.tables.build_metadata` into the same metadata as the
memory tables (that module describes the whole schema).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
)
from sqlalchemy.dialects.postgresql import JSONB, TSVECTOR

from ._column_types import BinaryVector, timestamp_column
from ._names import MAX_HNSW_DIMENSION, Names

__all__ = ["rag_tables"]


def rag_tables(
    metadata: MetaData, names: Names, dimension: int | None
) -> tuple[Table, Table, Table]:
    """The RAG source grants, scope generations and chunks tables (in that order) of ``names``,
    in ``metadata``; ``dimension`` pins the chunks' vectors and adds their HNSW index."""
    rag_source_acl = Table(
        names.rag_source_acl,
        metadata,
        Column("tenant_id", Text, nullable=False),
        Column("scope", Text, nullable=False),
        Column("source_id", Text, nullable=False),
        Column("principal_kind", Text, nullable=False),
        Column("principal_id", Text, nullable=False),
        Column("access_version", BigInteger, nullable=False),
        timestamp_column("created_at"),
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
        timestamp_column("updated_at"),
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
        timestamp_column("created_at"),
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
    return rag_source_acl, rag_scope_generations, rag_chunks
