"""prism_memory: RAG chunks table; source grants keyed by RAG scope.

Revision ID: prism_memory_0006
Revises: prism_memory_0004
Create Date: 2026-12-01

* ``<table>_rag_chunks`` holds document chunks by ``(tenant_id, scope, generation, source_id,
  chunk_index)`` with their vectors, ``text_tsv`` -- the chunk's terms from
  :func:`prism_memory.lexical.tokenize` with their positions, written by the store so both backends
  count the same terms -- under a GIN index, ``term_count`` (the BM25 length) and, when the
  dimension is pinned (≤ 2,000), an HNSW index of its own. Chunks are kept out of the entries table
  so a corpus's HNSW graph holds only chunks and per-thread memory scans never see them. The table
  is new and empty, so its indexes are built in the migration's transaction.
* ``<table>_rag_source_acl`` gains ``scope`` (the RAG scope's key within the tenant): a grant now
  belongs to one tenant *and* scope, so two resources of a tenant that both name a source
  ``"handbook"`` can never share (or overwrite) each other's grants. The primary key and the
  principal index are rebuilt with it. Rows written before (no API wrote any) get the scope
  ``''``, which no :class:`~prism_memory.rag.RagScope` has: they deny.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import VECTOR
from sqlalchemy.dialects import postgresql

from prism_memory.postgres.migrate import revision_settings
from prism_memory.postgres.tables import MAX_HNSW_DIMENSION

revision: str = "prism_memory_0006"
down_revision: str | Sequence[str] | None = "prism_memory_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _pinned_width(schema: str, entries: str) -> int | None:
    """The width ``<table>.embedding`` is pinned to, when upgrading a live database."""
    if op.get_context().as_sql:
        return None
    typmod = (
        op.get_bind()
        .execute(
            sa.text(
                "SELECT a.atttypmod FROM pg_attribute a WHERE a.attrelid = to_regclass(:rel) "
                "AND a.attname = 'embedding' AND NOT a.attisdropped"
            ),
            {"rel": f'"{schema}"."{entries}"'},
        )
        .scalar()
    )
    return int(typmod) if typmod is not None and int(typmod) > 0 else None


def upgrade() -> None:
    s = revision_settings()
    n = s.names
    # A host upgrading without naming the dimension keeps the width its entries are pinned to.
    dimension = s.dimension if s.dimension is not None else _pinned_width(s.schema, n.entries)
    op.create_table(
        n.rag_chunks,
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("source_id", sa.Text(), nullable=False),
        sa.Column("chunk_index", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("metadata", postgresql.JSONB(), nullable=False),
        sa.Column("digest", sa.Text(), nullable=False),
        sa.Column("embedding", VECTOR(dimension), nullable=False),
        sa.Column("text_tsv", postgresql.TSVECTOR(), nullable=False),
        sa.Column("term_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "scope",
            "generation",
            "source_id",
            "chunk_index",
            name=f"{n.rag_chunks}_pkey",
        ),
        schema=s.schema,
    )
    op.create_index(
        n.ix_rag_chunks_tsv, n.rag_chunks, ["text_tsv"], schema=s.schema, postgresql_using="gin"
    )
    if dimension is not None and dimension <= MAX_HNSW_DIMENSION:
        op.create_index(
            n.ix_rag_chunks_hnsw,
            n.rag_chunks,
            ["embedding"],
            schema=s.schema,
            postgresql_using="hnsw",
            postgresql_ops={"embedding": "vector_cosine_ops"},
        )

    op.add_column(
        n.rag_source_acl,
        sa.Column("scope", sa.Text(), nullable=False, server_default=sa.text("''")),
        schema=s.schema,
    )
    op.alter_column(n.rag_source_acl, "scope", server_default=None, schema=s.schema)
    op.drop_index(n.ix_acl_principal, table_name=n.rag_source_acl, schema=s.schema)
    op.drop_constraint(f"{n.rag_source_acl}_pkey", n.rag_source_acl, schema=s.schema)
    op.create_primary_key(
        f"{n.rag_source_acl}_pkey",
        n.rag_source_acl,
        ["tenant_id", "scope", "source_id", "principal_kind", "principal_id"],
        schema=s.schema,
    )
    op.create_index(
        n.ix_acl_principal,
        n.rag_source_acl,
        ["tenant_id", "scope", "principal_kind", "principal_id", "source_id"],
        schema=s.schema,
    )


def downgrade() -> None:
    s = revision_settings()
    n = s.names
    op.drop_index(n.ix_acl_principal, table_name=n.rag_source_acl, schema=s.schema)
    op.drop_constraint(f"{n.rag_source_acl}_pkey", n.rag_source_acl, schema=s.schema)
    # Grants of one source in several scopes would collide on the old key: keep one of them.
    op.execute(
        f'DELETE FROM "{s.schema}"."{n.rag_source_acl}" a USING "{s.schema}"."{n.rag_source_acl}" b '  # noqa: S608 - quoted identifiers, bound values
        "WHERE a.tenant_id = b.tenant_id AND a.source_id = b.source_id "
        "AND a.principal_kind = b.principal_kind AND a.principal_id = b.principal_id "
        "AND a.scope > b.scope"
    )
    op.drop_column(n.rag_source_acl, "scope", schema=s.schema)
    op.create_primary_key(
        f"{n.rag_source_acl}_pkey",
        n.rag_source_acl,
        ["tenant_id", "source_id", "principal_kind", "principal_id"],
        schema=s.schema,
    )
    op.create_index(
        n.ix_acl_principal,
        n.rag_source_acl,
        ["tenant_id", "principal_kind", "principal_id", "source_id"],
        schema=s.schema,
    )
    op.drop_table(n.rag_chunks, schema=s.schema)
