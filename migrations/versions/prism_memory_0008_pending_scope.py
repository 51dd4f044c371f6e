"""prism_memory: partial indexes for one thread's pending rows and for a worker's leases.

Revision ID: prism_memory_0008
Revises: prism_memory_0005
Create Date: 2026-12-01

``(tenant_id, resource_id, thread_id, sequence, id) WHERE status = 'pending'`` serves the claims of
one thread (a memory's start-up claim, a shared queue's per-thread probes): finding nothing due is
one index probe, whatever the thread's size and however large other threads' backlogs are.
``(claimed_by) WHERE claimed_by IS NOT NULL`` lets a closing queue release its leases without
scanning the table. Both hold pending or leased rows only, so writing indexed rows does not
maintain them. Built ``CONCURRENTLY`` in an autocommit block, so upgrading a populated table does
not block writers.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from prism_memory.postgres.migrate import revision_settings

revision: str = "prism_memory_0008"
down_revision: str | Sequence[str] | None = "prism_memory_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    s = revision_settings()
    n = s.names
    with op.get_context().autocommit_block():
        op.create_index(
            n.ix_pending_scope,
            n.entries,
            ["tenant_id", "resource_id", "thread_id", "sequence", "id"],
            schema=s.schema,
            postgresql_where=sa.text("status = 'pending'::text"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )
        op.create_index(
            n.ix_claimed,
            n.entries,
            ["claimed_by"],
            schema=s.schema,
            postgresql_where=sa.text("claimed_by IS NOT NULL"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    s = revision_settings()
    n = s.names
    with op.get_context().autocommit_block():
        for name in (n.ix_claimed, n.ix_pending_scope):
            op.drop_index(
                name,
                table_name=n.entries,
                schema=s.schema,
                postgresql_concurrently=True,
                if_exists=True,
            )
