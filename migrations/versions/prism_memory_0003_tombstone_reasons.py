"""prism_memory: tombstones of different causes coexist (reason joins the invalidation key).

Revision ID: prism_memory_0003
Revises: prism_memory_0002
Create Date: 2026-12-01

Before, ``(entry_id, cause_id)`` was the key, so revoking a corrected or held source overwrote its
``corrected``/``held`` tombstone, and the re-grant then deleted the only marker left. The key now
includes ``reason``; existing rows keep their single reason, so the upgrade loses nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from prism_memory.postgres.migrate import revision_settings

revision: str = "prism_memory_0003"
down_revision: str | Sequence[str] | None = "prism_memory_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEY = ["tenant_id", "resource_id", "thread_id", "entry_id", "cause_id"]


def upgrade() -> None:
    s = revision_settings()
    n = s.names
    name = f"{n.invalidation}_pkey"
    op.drop_constraint(name, n.invalidation, schema=s.schema, type_="primary")
    op.create_primary_key(name, n.invalidation, [*_KEY, "reason"], schema=s.schema)


def downgrade() -> None:
    s = revision_settings()
    n = s.names
    name = f"{n.invalidation}_pkey"
    table = f'"{s.schema}"."{n.invalidation}"'
    # keep the newest tombstone of each (entry, cause) so the narrower key can be restored
    op.execute(
        f"DELETE FROM {table} t USING {table} u "  # noqa: S608 - validated, quoted identifiers
        "WHERE (t.tenant_id, t.resource_id, t.thread_id, t.entry_id, t.cause_id) = "
        "(u.tenant_id, u.resource_id, u.thread_id, u.entry_id, u.cause_id) "
        "AND (t.created_at, t.reason) < (u.created_at, u.reason)"
    )
    op.drop_constraint(name, n.invalidation, schema=s.schema, type_="primary")
    op.create_primary_key(name, n.invalidation, _KEY, schema=s.schema)
