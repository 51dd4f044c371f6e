"""prism_memory: a row-level security policy on every tenant-keyed table.

Revision ID: prism_memory_0014
Revises: prism_memory_0013
Create Date: 2026-12-06

Each table keyed by tenant -- the entries, the lineage tombstones, the share grants, the RAG source
ACL, scope generations and chunks, the working documents and a shadow generation's vectors -- gets
the policy ``prism_memory_tenant``: a row may be read and written only by a transaction whose
``prism_memory.tenant_id`` setting names its tenant (``USING`` and ``WITH CHECK``). The store-wide
generations registry gets none.

A policy does nothing until row-level security is enabled on its table, and this revision does not
enable it: that is the deploy's choice (``prism-memory rls enable``, or
``create_postgres_memory_stores(..., row_level_security=True)``; docs/postgres.md). Catalog-only:
nothing is rewritten or locked for long. The downgrade drops the policies and disables row-level
security where it was enabled (without its policy, an enabled table would refuse every row).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from prism_memory.postgres.migrate import revision_settings

revision: str = "prism_memory_0014"
down_revision: str | Sequence[str] | None = "prism_memory_0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PREDICATE = "tenant_id = (SELECT current_setting('prism_memory.tenant_id', true))"


def _tenant_tables() -> list[str]:
    n = revision_settings().names
    return [
        n.entries,
        n.invalidation,
        n.share_grant,
        n.rag_source_acl,
        n.rag_scope_generations,
        n.rag_chunks,
        n.working,
        n.vectors,
    ]


def _qualified(table: str) -> str:
    return f'"{revision_settings().schema}"."{table}"'


def upgrade() -> None:
    for table in _tenant_tables():
        op.execute(f"DROP POLICY IF EXISTS prism_memory_tenant ON {_qualified(table)}")
        op.execute(
            f"CREATE POLICY prism_memory_tenant ON {_qualified(table)} "
            f"USING ({_PREDICATE}) WITH CHECK ({_PREDICATE})"
        )


def downgrade() -> None:
    for table in _tenant_tables():
        op.execute(
            f"ALTER TABLE {_qualified(table)} "
            "NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY"
        )
        op.execute(f"DROP POLICY IF EXISTS prism_memory_tenant ON {_qualified(table)}")
