"""prism_memory: drop the entries' HNSW index, which no query reads.

Revision ID: prism_memory_0010
Revises: prism_memory_0009
Create Date: 2026-12-01

Memory recall is always the exact per-scope path: a thread's B-tree range (``ix_scope``), sorted by
exact distance, plus the resource's travelling rows (``ix_resource_shared``) for a resource-wide
recall. The HNSW graph ``prism_memory_0002`` built on ``<table>.embedding`` was read by none of
them (``pg_stat_user_indexes.idx_scan`` stayed 0 through whole benchmarks) while every write paid
for its maintenance: ``remember(wait=True)`` of 128-row batches ran at 157 rows/s with it and
1,034-1,203 rows/s without it, side by side. Dropped ``CONCURRENTLY`` in an autocommit block, so
upgrading never blocks readers or writers. The RAG chunks keep their own HNSW index (their
corpus-wide queries use it). The downgrade builds it again as ``prism_memory_0002`` did.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from prism_memory.postgres.migrate import revision_settings
from prism_memory.postgres.tables import MAX_HNSW_DIMENSION

revision: str = "prism_memory_0010"
down_revision: str | Sequence[str] | None = "prism_memory_0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
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


def downgrade() -> None:
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
