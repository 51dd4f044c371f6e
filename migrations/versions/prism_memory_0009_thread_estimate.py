"""prism_memory: the planner estimates a thread at a few rows, whatever the table holds.

Revision ID: prism_memory_0009
Revises: prism_memory_0008
Create Date: 2026-12-01

Per-thread reads name the thread as a parameter of a plan that PostgreSQL caches, so the planner
estimates "rows of one thread" from the column's distinct count: table rows / threads. While a
table holds few threads (a new deployment: three threads, one of them 10,000 rows), that estimate
was a third of the table and a 100-row thread's recall scanned the whole table (3.7 ms instead of
1.1 ms; 7.2 instead of 3.4 ms for a 1,000-row thread). ``n_distinct = -0.05`` tells ``ANALYZE``
that threads are 5 % of the rows, about 20 rows each, at any table size: the thread's B-tree
range is read by its index for a 13-row and a 13,000-row thread alike (for a thread that is most
of the table an index scan costs what a sequential scan does). The table is analysed here so the
estimate holds at once; ``ANALYZE`` blocks neither reads nor writes.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from prism_memory.postgres.migrate import revision_settings

revision: str = "prism_memory_0009"
down_revision: str | Sequence[str] | None = "prism_memory_0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

THREAD_FRACTION = -0.05
"""``n_distinct`` of ``thread_id``: negative, a fraction of the rows (distinct threads = 5 %)."""


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def upgrade() -> None:
    s = revision_settings()
    table = f"{_quote(s.schema)}.{_quote(s.names.entries)}"
    op.execute(f"ALTER TABLE {table} ALTER COLUMN thread_id SET (n_distinct = {THREAD_FRACTION})")
    op.execute(f"ANALYZE {table}")


def downgrade() -> None:
    s = revision_settings()
    table = f"{_quote(s.schema)}.{_quote(s.names.entries)}"
    op.execute(f"ALTER TABLE {table} ALTER COLUMN thread_id RESET (n_distinct)")
    op.execute(f"ANALYZE {table}")
