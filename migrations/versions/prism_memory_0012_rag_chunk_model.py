"""prism_memory: the embedding model of each RAG chunk's vector.

Revision ID: prism_memory_0012
Revises: prism_memory_0011
Create Date: 2026-12-04

``<table>_rag_chunks.embedding_model`` records the ``model`` identifier of the embedder that made
a chunk's vector, so ``hybrid_query`` can refuse to compare a query with vectors of another model
and a generation can be re-embedded with a new one (docs/rag.md, "Changing the embedding model").
Existing rows get ``NULL`` ("not recorded": trusted as the query's model). A nullable column
without a default: a catalog-only change, nothing is rewritten. The downgrade drops it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from prism_memory.postgres.migrate import revision_settings

revision: str = "prism_memory_0012"
down_revision: str | Sequence[str] | None = "prism_memory_0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    s = revision_settings()
    n = s.names
    op.add_column(
        n.rag_chunks, sa.Column("embedding_model", sa.Text(), nullable=True), schema=s.schema
    )


def downgrade() -> None:
    s = revision_settings()
    n = s.names
    op.drop_column(n.rag_chunks, "embedding_model", schema=s.schema)
