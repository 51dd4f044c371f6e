"""prism_memory: entries, tombstones, share grants, RAG ACLs and generations, working memory.

Revision ID: prism_memory_0001
Revises:
Create Date: 2025-01-01

Every name comes from the host's settings (schema, table, dimension). ``embedding`` is
``vector(dimension)`` when the dimension is pinned, else a plain ``vector``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import VECTOR
from sqlalchemy.dialects import postgresql

from prism_memory.postgres.migrate import revision_settings

revision: str = "prism_memory_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("prism_memory",)
depends_on: str | Sequence[str] | None = None

_LINEAGE = "((metadata -> '_lineage'::text) -> 'sourceIds'::text)"


def _ts(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    s = revision_settings()
    n = s.names
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.execute(f'CREATE SCHEMA IF NOT EXISTS "{s.schema}"')

    op.create_table(
        n.entries,
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("resource_id", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.Text(), nullable=False),
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("metadata", postgresql.JSONB(), nullable=False),
        sa.Column("consent_explicit", sa.Boolean(), nullable=False),
        sa.Column("consent_source", sa.Text(), nullable=False),
        sa.Column("consent_scope", sa.Text(), nullable=False),
        sa.Column("consent_visible", sa.Boolean(), nullable=False),
        _ts("consent_granted_at", nullable=True),
        _ts("consent_revoked_at", nullable=True),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        _ts("occurred_at"),
        _ts("created_at"),
        _ts("written_at"),
        sa.Column("importance", sa.Double(), nullable=False),
        sa.Column("legal_hold", sa.Boolean(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        _ts("next_attempt_at", nullable=True),
        sa.Column("claimed_by", sa.Text(), nullable=True),
        _ts("claimed_until", nullable=True),
        sa.Column("embedding", VECTOR(s.dimension), nullable=True),
        sa.Column(
            "text_tsv",
            postgresql.TSVECTOR(),
            sa.Computed("to_tsvector('simple'::regconfig, text)", persisted=True),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "resource_id", "thread_id", "id", name=f"{n.entries}_pkey"
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'indexed', 'failed')", name=f"{n.entries}_status_check"
        ),
        schema=s.schema,
    )
    op.create_index(
        n.ix_scope,
        n.entries,
        ["tenant_id", "resource_id", "thread_id", "sequence"],
        schema=s.schema,
    )
    op.create_index(
        n.ix_pending,
        n.entries,
        ["sequence", "id"],
        schema=s.schema,
        postgresql_where=sa.text("status = 'pending'::text"),
    )
    op.create_index(
        n.ix_lineage, n.entries, [sa.text(_LINEAGE)], schema=s.schema, postgresql_using="gin"
    )
    op.create_index(n.ix_tsv, n.entries, ["text_tsv"], schema=s.schema, postgresql_using="gin")

    op.create_table(
        n.invalidation,
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("resource_id", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.Text(), nullable=False),
        sa.Column("entry_id", sa.Text(), nullable=False),
        sa.Column("cause_id", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        _ts("created_at"),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "resource_id",
            "thread_id",
            "entry_id",
            "cause_id",
            name=f"{n.invalidation}_pkey",
        ),
        schema=s.schema,
    )
    op.create_index(
        n.ix_invalidation_cause,
        n.invalidation,
        ["tenant_id", "resource_id", "thread_id", "cause_id"],
        schema=s.schema,
    )

    op.create_table(
        n.share_grant,
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("resource_id", sa.Text(), nullable=False),
        sa.Column("parent_thread_id", sa.Text(), nullable=False),
        sa.Column("child_thread_id", sa.Text(), nullable=False),
        sa.Column("source_ids", postgresql.ARRAY(sa.Text()), nullable=False),
        _ts("created_at"),
        _ts("expires_at", nullable=True),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "resource_id",
            "parent_thread_id",
            "child_thread_id",
            name=f"{n.share_grant}_pkey",
        ),
        schema=s.schema,
    )

    op.create_table(
        n.rag_source_acl,
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("source_id", sa.Text(), nullable=False),
        sa.Column("principal_kind", sa.Text(), nullable=False),
        sa.Column("principal_id", sa.Text(), nullable=False),
        sa.Column("access_version", sa.BigInteger(), nullable=False),
        _ts("created_at"),
        sa.PrimaryKeyConstraint(
            "tenant_id",
            "source_id",
            "principal_kind",
            "principal_id",
            name=f"{n.rag_source_acl}_pkey",
        ),
        sa.CheckConstraint(
            "principal_kind IN ('principal', 'group')", name=f"{n.rag_source_acl}_kind_check"
        ),
        schema=s.schema,
    )
    op.create_index(
        n.ix_acl_principal,
        n.rag_source_acl,
        ["tenant_id", "principal_kind", "principal_id", "source_id"],
        schema=s.schema,
    )

    op.create_table(
        n.rag_scope_generations,
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("tenant_id", "scope", name=f"{n.rag_scope_generations}_pkey"),
        schema=s.schema,
    )

    op.create_table(
        n.working,
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("resource_id", sa.Text(), nullable=False),
        sa.Column("thread_key", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("data", postgresql.JSONB(), nullable=False),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("tenant_id", "resource_id", "thread_key", name=f"{n.working}_pkey"),
        schema=s.schema,
    )


def downgrade() -> None:
    s = revision_settings()
    n = s.names
    for table in (
        n.working,
        n.rag_scope_generations,
        n.rag_source_acl,
        n.share_grant,
        n.invalidation,
        n.entries,
    ):
        op.drop_table(table, schema=s.schema)
