"""The statements of PostgreSQL row-level security on prism_memory's tenant-keyed tables: the
tenant a statement runs for, the policy revision ``prism_memory_0014`` creates, and the catalog
reads of ``prism-memory rls status`` and ``doctor``.

The policy on every tenant-keyed table is ``tenant_id = (SELECT current_setting(
'prism_memory.tenant_id', true))`` (:data:`POLICY_PREDICATE`, for reading and for writing). The
setting is always **transaction-local** (``set_config(..., true)``), so it never outlives the
statement's transaction -- also behind a transaction pooler, where the next transaction on the
server connection may be another client's. How the executor sets it:

* a read that runs alone is wrapped by :func:`tenant_gate`: ``SELECT * FROM (<read>) AS
  prism_tenant_gate WHERE (SELECT set_config(...)) IS NOT NULL``. The condition names no column,
  so the planner makes it a gating ``Result`` node's one-time filter above the whole read, which
  the executor evaluates before it starts the plan below; the policy's sub-select is evaluated
  lazily, by the scan that first needs it, after that. One statement, one round trip; the read is
  still prepared once per connection and its plan cached;
* a transaction sets it in the message that begins it (:func:`set_tenant_literal` after
  ``BEGIN``): no round trip of its own;
* a SQLAlchemy session unit runs :data:`SET_TENANT` first (one more round trip: governance, the
  working document, the RAG operations -- not recall).

A leaf: it imports nothing of the package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "POLICY_NAME",
    "POLICY_PREDICATE",
    "RLS_TABLES",
    "ROLE_BYPASSES",
    "SET_TENANT",
    "TENANT_POLICIES",
    "TENANT_SETTING",
    "alter_row_security",
    "create_policy",
    "drop_policy",
    "one_select",
    "set_tenant_literal",
    "tenant_gate",
    "tenant_of",
]

TENANT_SETTING: Final = "prism_memory.tenant_id"
"""The setting the policies read: the tenant the current transaction acts for."""

POLICY_NAME: Final = "prism_memory_tenant"
"""The policy's name on every tenant-keyed table."""

POLICY_PREDICATE: Final = f"tenant_id = (SELECT current_setting('{TENANT_SETTING}', true))"
"""The rows a transaction may read and write: those of the tenant it set. With no tenant set the
setting is ``NULL`` (or ``''`` after an earlier transaction of the session set one) and matches no
row. ``current_setting`` is wrapped in a sub-select so that it is evaluated once per statement (an
InitPlan) and compared like a parameter: ``tenant_id = $x`` is an index condition of the tables'
primary keys, which all lead with ``tenant_id``."""

SET_TENANT: Final = f"SELECT set_config('{TENANT_SETTING}', :rls_tenant, true)"
"""Set the tenant for the rest of the transaction (a session unit's first statement)."""

TENANT_POLICIES: Final = """
SELECT c.relname AS table_name,
       c.relrowsecurity AS enabled,
       c.relforcerowsecurity AS forced,
       EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = :policy)
         AS has_policy
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
 WHERE n.nspname = :schema AND c.relkind IN ('r', 'p') AND c.relname = ANY(:tables)
 ORDER BY c.relname
"""
"""Each of ``:tables`` that has a ``tenant_id`` column: whether row-level security is enabled and
forced on it and whether it has prism_memory's policy."""

RLS_TABLES: Final = """
SELECT c.relname
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
 WHERE n.nspname = :schema AND c.relkind IN ('r', 'p')
 ORDER BY c.relname
"""
"""Every table of ``:schema`` with a ``tenant_id`` column (a test checks each has the policy)."""

ROLE_BYPASSES: Final = (
    "SELECT current_user AS role_name, r.rolsuper AS superuser, r.rolbypassrls AS bypassrls "
    "FROM pg_roles r WHERE r.rolname = current_user"
)
"""Whether the connected role is exempt from every policy (a superuser, or ``BYPASSRLS``)."""


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _qualified(schema: str, table: str) -> str:
    return f"{_quote(schema)}.{_quote(table)}"


def create_policy(schema: str, table: str) -> str:
    """``CREATE POLICY`` of :data:`POLICY_PREDICATE` on ``schema.table`` (every command, every
    role; ``USING`` and ``WITH CHECK``)."""
    return (
        f"CREATE POLICY {POLICY_NAME} ON {_qualified(schema, table)} "
        f"USING ({POLICY_PREDICATE}) WITH CHECK ({POLICY_PREDICATE})"
    )


def drop_policy(schema: str, table: str) -> str:
    """``DROP POLICY IF EXISTS`` of the policy on ``schema.table``."""
    return f"DROP POLICY IF EXISTS {POLICY_NAME} ON {_qualified(schema, table)}"


def alter_row_security(schema: str, table: str, *, enable: bool) -> str:
    """Enable row-level security on ``schema.table`` and force it on its owner too, or disable
    both (one ``ALTER TABLE``)."""
    if enable:
        change = "ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY"
    else:
        change = "NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY"
    return f"ALTER TABLE {_qualified(schema, table)} {change}"


def tenant_gate(statement: str) -> str:
    """``statement`` (a read) run for the tenant bound as ``:rls_tenant``: the setting is made by
    a one-time filter of the outermost plan node, before any row of ``statement`` is read (see the
    module docstring)."""
    return (
        f"SELECT * FROM ({statement}) AS prism_tenant_gate "  # noqa: S608 - our own statement
        f"WHERE (SELECT set_config('{TENANT_SETTING}', :rls_tenant, true)) IS NOT NULL"
    )


def set_tenant_literal(tenant: str) -> str:
    """``SELECT set_config(...)`` with the tenant as an escaped literal, to append to a ``BEGIN``
    sent in the simple protocol (which binds nothing). An ``E''`` string, so its escaping does not
    depend on ``standard_conforming_strings``."""
    escaped = tenant.replace("\\", "\\\\").replace("'", "''")
    return f"SELECT set_config('{TENANT_SETTING}', E'{escaped}', true)"


def begin_for(begin: str, tenant: str | None) -> str:
    """``begin`` with ``tenant``'s ``set_config`` in the same round trip (row-level security), or
    ``begin`` as it is when there is no tenant to set."""
    return begin if tenant is None else f"{begin}; {set_tenant_literal(tenant)}"


def tenant_of(params: Mapping[str, Any] | None) -> str | None:
    """The one tenant a statement's parameters name (``:tenant``, or ``:tenants`` all alike), or
    ``None``: a store-wide statement, or one over several tenants."""
    if not params:
        return None
    tenant = params.get("tenant")
    if isinstance(tenant, str):
        return tenant
    tenants = params.get("tenants")
    if isinstance(tenants, list | tuple) and tenants and isinstance(tenants[0], str):
        first = tenants[0]
        return first if all(other == first for other in tenants) else None
    return None


def one_select(selects: list[str]) -> str:
    """Statements ``SELECT a, b`` and ``SELECT c`` (settings, no ``FROM``) as one ``SELECT a, b,
    c``: one round trip."""
    return "SELECT " + ", ".join(select.removeprefix("SELECT ") for select in selects)
