"""prism_memory: vector generations -- a registry of embedding models and a shadow model's vectors.

Revision ID: prism_memory_0011
Revises: prism_memory_0010
Create Date: 2026-12-03

* ``<table>_generations`` registers each embedding model whose vectors the store holds: ``model``
  (the key), ``width``, ``role`` (``primary``: the entries' own ``embedding``; ``shadow``: another
  model's vectors kept beside them), ``active`` (which one recall answers from; the unique partial
  index ``<table>_generations_active_idx`` allows at most one active row), ``started_at`` and
  ``switched_at``. It has no tenant: a switch is one statement for the whole store.
* ``<table>_vectors`` holds a shadow generation's vectors, one per entry and model, keyed by
  ``(tenant_id, resource_id, thread_id, entry_id, model)``, with the entry ``revision`` they
  embed (a vector of an older revision is stale and never ranked), a plain unpinned ``vector``
  (``NULL`` while a backfill worker only holds the lease ``claimed_by``/``claimed_until``). Its
  foreign keys cascade: deleting an entry deletes its vectors of every generation, deleting a
  generation's registry row deletes all its vectors.

Both tables are new and empty: nothing is rewritten. The downgrade drops them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import VECTOR

from prism_memory.postgres.migrate import revision_settings

revision: str = "prism_memory_0011"
down_revision: str | Sequence[str] | None = "prism_memory_0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    s = revision_settings()
    n = s.names
    op.create_table(
        n.generations,
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("switched_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("model", name=f"{n.generations}_pkey"),
        sa.CheckConstraint("role IN ('primary', 'shadow')", name=f"{n.generations}_role_check"),
        schema=s.schema,
    )
    op.create_index(
        n.ix_generations_active,
        n.generations,
        ["active"],
        unique=True,
        schema=s.schema,
        postgresql_where=sa.text("active"),
    )
    key = ["tenant_id", "resource_id", "thread_id", "entry_id"]
    op.create_table(
        n.vectors,
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("resource_id", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.Text(), nullable=False),
        sa.Column("entry_id", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("embedding", VECTOR(), nullable=True),
        sa.Column("claimed_by", sa.Text(), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint(*key, "model", name=f"{n.vectors}_pkey"),
        sa.ForeignKeyConstraint(
            key,
            [
                f"{s.schema}.{n.entries}.{c}"
                for c in ("tenant_id", "resource_id", "thread_id", "id")
            ],
            name=f"{n.vectors}_entry_fkey",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["model"],
            [f"{s.schema}.{n.generations}.model"],
            name=f"{n.vectors}_model_fkey",
            ondelete="CASCADE",
        ),
        schema=s.schema,
    )


def downgrade() -> None:
    s = revision_settings()
    n = s.names
    op.drop_table(n.vectors, schema=s.schema)
    op.drop_index(n.ix_generations_active, table_name=n.generations, schema=s.schema)
    op.drop_table(n.generations, schema=s.schema)
