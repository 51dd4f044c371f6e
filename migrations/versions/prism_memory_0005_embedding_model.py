"""prism_memory: the embedding model of each vector, and an index for resource-wide recall.

Revision ID: prism_memory_0005
Revises: prism_memory_0006
Create Date: 2026-12-01

``embedding_model`` records the ``model`` identifier of the embedder that made a row's vector, so a
different model in the same thread is detected instead of silently mixing vector spaces. Existing
rows get ``NULL`` ("unknown"). The partial index serves ``recall(..., scope="resource")``: the
user/profile-scoped entries of every thread of one tenant + resource.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from prism_memory.postgres.migrate import revision_settings
from prism_memory.postgres.tables import RESOURCE_SHARED

revision: str = "prism_memory_0005"
down_revision: str | Sequence[str] | None = "prism_memory_0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    s = revision_settings()
    n = s.names
    op.add_column(
        n.entries, sa.Column("embedding_model", sa.Text(), nullable=True), schema=s.schema
    )
    op.create_index(
        n.ix_resource_shared,
        n.entries,
        ["tenant_id", "resource_id", "sequence"],
        schema=s.schema,
        postgresql_where=sa.text(RESOURCE_SHARED),
    )


def downgrade() -> None:
    s = revision_settings()
    n = s.names
    op.drop_index(n.ix_resource_shared, table_name=n.entries, schema=s.schema)
    op.drop_column(n.entries, "embedding_model", schema=s.schema)
