"""prism_memory: HNSW index on the embeddings, when the dimension is pinned.

Revision ID: prism_memory_0002
Revises: prism_memory_0001
Create Date: 2025-01-01

Built ``CONCURRENTLY`` in an autocommit block, so upgrading a populated table never blocks writers.
Without a pinned dimension (or above pgvector's 2,000-dimension HNSW limit) this revision does
nothing: per-thread recall is an exact scan over the scope's B-tree range either way.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from prism_memory.postgres.migrate import revision_settings
from prism_memory.postgres.tables import MAX_HNSW_DIMENSION

revision: str = "prism_memory_0002"
down_revision: str | Sequence[str] | None = "prism_memory_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    s = revision_settings()
    if s.dimension is None or s.dimension > MAX_HNSW_DIMENSION:
        return
    n = s.names
    with op.get_context().autocommit_block():
        op.create_index(
            n.ix_hnsw,
            n.entries,
            ["embedding"],
            schema=s.schema,
            postgresql_using="hnsw",
            postgresql_ops={"embedding": "vector_cosine_ops"},
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    s = revision_settings()
    n = s.names
    with op.get_context().autocommit_block():
        op.drop_index(
            n.ix_hnsw,
            table_name=n.entries,
            schema=s.schema,
            postgresql_concurrently=True,
            if_exists=True,
        )
