"""prism_memory: NOTIFY the indexing workers when rows become pending; index pending rows by tenant.

Revision ID: prism_memory_0007
Revises: prism_memory_0003
Create Date: 2026-12-01

Two statement-level triggers (one per event: PostgreSQL allows transition tables on single-event
triggers only) send ``pg_notify('prism_memory_pending', '<schema>.<table>')`` once per statement
that inserted or updated rows into ``status = 'pending'``, so ``prism-memory worker`` wakes on new
work instead of polling. NOTIFY is delivered at commit and de-duplicated within a transaction.

The partial index ``(tenant_id, sequence, id) WHERE status = 'pending'`` serves the worker's turns
between tenants: listing the tenants with pending rows is one index probe per tenant, and claiming
one tenant's oldest rows never walks another tenant's backlog. Built ``CONCURRENTLY`` in an
autocommit block, so upgrading a populated table does not block writers.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from prism_memory.postgres.migrate import revision_settings

revision: str = "prism_memory_0007"
down_revision: str | Sequence[str] | None = "prism_memory_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHANNEL = "prism_memory_pending"


def _names() -> tuple[str, str, str]:
    s = revision_settings()
    function = f'"{s.schema}"."{s.names.entries}_notify_pending"'
    table = f'"{s.schema}"."{s.names.entries}"'
    return function, table, f"{s.schema}.{s.names.entries}"


def upgrade() -> None:
    function, table, payload = _names()
    entries = revision_settings().names.entries
    op.execute(  # names are validated identifiers; there are no values
        f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$\n"  # noqa: S608
        "BEGIN\n"
        "  IF EXISTS (SELECT 1 FROM new_rows WHERE status = 'pending') THEN\n"
        f"    PERFORM pg_notify('{CHANNEL}', '{payload}');\n"
        "  END IF;\n"
        "  RETURN NULL;\n"
        "END\n"
        "$$"
    )
    for event in ("insert", "update"):
        op.execute(
            f'CREATE TRIGGER "{entries}_notify_{event}" AFTER {event.upper()} ON {table} '
            f"REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        )
    _create_index()


def _create_index() -> None:
    s = revision_settings()
    with op.get_context().autocommit_block():
        op.create_index(
            s.names.ix_pending_tenant,
            s.names.entries,
            ["tenant_id", "sequence", "id"],
            schema=s.schema,
            postgresql_where=sa.text("status = 'pending'::text"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    s = revision_settings()
    with op.get_context().autocommit_block():
        op.drop_index(
            s.names.ix_pending_tenant,
            table_name=s.names.entries,
            schema=s.schema,
            postgresql_concurrently=True,
            if_exists=True,
        )
    function, table, _ = _names()
    entries = revision_settings().names.entries
    for event in ("insert", "update"):
        op.execute(f'DROP TRIGGER IF EXISTS "{entries}_notify_{event}" ON {table}')
    op.execute(f"DROP FUNCTION IF EXISTS {function}()")
