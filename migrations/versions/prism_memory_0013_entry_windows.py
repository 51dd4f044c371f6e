"""prism_memory: the later windows' vectors of entries longer than their embedder's window.

Revision ID: prism_memory_0013
Revises: prism_memory_0012
Create Date: 2026-12-06

``<table>.window_embeddings`` (``vector[]``) holds, for an entry longer than its embedder's
window, the vectors of its windows after the first (the first window's is ``embedding``); recall
scores such an entry by its best window with a margin (docs/semantics.md). It is written with
``embedding`` and lives and dies with the row. Existing rows get ``NULL`` (no later windows:
scored by ``embedding`` alone, as before; ``rebuild_index`` re-embeds them in windows). A nullable
column without a default: a catalog-only change, nothing is rewritten. The downgrade drops it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import VECTOR
from sqlalchemy.dialects import postgresql

from prism_memory.postgres.migrate import revision_settings

revision: str = "prism_memory_0013"
down_revision: str | Sequence[str] | None = "prism_memory_0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    s = revision_settings()
    n = s.names
    op.add_column(
        n.entries,
        sa.Column("window_embeddings", postgresql.ARRAY(VECTOR()), nullable=True),
        schema=s.schema,
    )


def downgrade() -> None:
    s = revision_settings()
    n = s.names
    op.drop_column(n.entries, "window_embeddings", schema=s.schema)
