# ruff: noqa: S608 - SQL text is built only from validated, quoted identifiers; values are bound.
"""The deferred-indexing ledger on the entries table: claims, leases, results and failures, and the
service worker's turn over tenants."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ...models import MemoryIdentity
from ..rows import scope_params
from ._base import TableSql, windows_of

__all__ = ["IndexingSql", "claim_in_statement", "claim_statement"]


class IndexingSql(TableSql):
    """The indexing ledger's statements for one table set."""

    @functools.lru_cache(maxsize=4)  # noqa: B019 - bounded
    def claim(self, *, scoped: bool, tenant: bool = False) -> str:
        """Lease due pending rows with ``FOR UPDATE SKIP LOCKED`` (never one row to two workers);
        of one thread (``scoped``), one tenant (``tenant``, the service worker's turns) or any.
        Index: the partial pending indexes -- by thread (``ix_pending_scope``), by tenant
        (``ix_pending_tenant``) or over all (``ix_pending``), each holding pending rows only."""
        scope = (
            "AND tenant_id = :tenant AND resource_id = :resource AND thread_id = :thread "
            if scoped
            else "AND tenant_id = :tenant "
            if tenant
            else ""
        )
        return (
            f"WITH due AS (SELECT tenant_id, resource_id, thread_id, id FROM {self.entries} "
            f"WHERE status = 'pending' {scope}"
            "AND (next_attempt_at IS NULL OR next_attempt_at <= :now) "
            "AND (claimed_until IS NULL OR claimed_until <= :now) "
            "ORDER BY sequence, id, tenant_id, resource_id, thread_id LIMIT :limit "
            f"FOR UPDATE SKIP LOCKED) {self._lease_due}"
        )

    @functools.cached_property
    def claim_in(self) -> str:
        """Lease due pending rows of many threads in one statement (a shared indexing loop's
        claim): for each thread of the arrays, in their order, its ``:each`` oldest due rows (one
        probe of the scope index or the pending-by-tenant index per thread), ``:limit`` in all."""
        return (
            "WITH due AS (SELECT d.tenant_id, d.resource_id, d.thread_id, d.id FROM "
            "unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), "
            "CAST(:threads AS text[])) AS s(tenant_id, resource_id, thread_id) "
            "CROSS JOIN LATERAL (SELECT tenant_id, resource_id, thread_id, id "
            f"FROM {self.entries} WHERE tenant_id = s.tenant_id "
            "AND resource_id = s.resource_id AND thread_id = s.thread_id AND status = 'pending' "
            "AND (next_attempt_at IS NULL OR next_attempt_at <= :now) "
            "AND (claimed_until IS NULL OR claimed_until <= :now) "
            "ORDER BY sequence, id LIMIT :each FOR UPDATE SKIP LOCKED) d LIMIT :limit) "
            f"{self._lease_due}"
        )

    @functools.cached_property
    def _lease_due(self) -> str:
        """The claims' second half: lease the ``due`` rows to ``:worker`` and return them (one
        primary-key probe per row)."""
        return (
            f"UPDATE {self.entries} e SET claimed_by = :worker, claimed_until = :until FROM due "
            "WHERE e.tenant_id = due.tenant_id AND e.resource_id = due.resource_id "
            "AND e.thread_id = due.thread_id AND e.id = due.id "
            "RETURNING e.tenant_id, e.resource_id, e.thread_id, e.id, e.revision, e.text, "
            "e.attempts, e.sequence, e.claimed_until"
        )

    @functools.cached_property
    def release(self) -> str:
        """Drop every lease ``:worker`` holds on pending rows (the partial index on
        ``claimed_by``, revision ``prism_memory_0008``, finds them without a table scan)."""
        return (
            f"UPDATE {self.entries} SET claimed_by = NULL, claimed_until = NULL "
            "WHERE claimed_by = :worker AND status = 'pending'"
        )

    @functools.cached_property
    def complete(self) -> str:
        """Store claimed vectors where the lease (worker, unexpired, and the very lease the claim
        set when it names one) and revision still match (one primary-key probe per row)."""
        return (
            f"UPDATE {self.entries} e SET embedding = v.embedding, status = 'indexed', "
            f"embedding_model = CAST(:model AS text), window_embeddings = {windows_of('v.ord')}, "
            "last_error = NULL, next_attempt_at = NULL, claimed_by = NULL, claimed_until = NULL "
            "FROM unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), "
            "CAST(:threads AS text[]), CAST(:ids AS text[]), CAST(:revisions AS integer[]), "
            "CAST(:embeddings AS vector[]), CAST(:leases AS timestamptz[])) WITH ORDINALITY "
            "AS v(tenant_id, resource_id, thread_id, id, revision, embedding, lease_until, ord) "
            "WHERE e.tenant_id = v.tenant_id AND e.resource_id = v.resource_id "
            "AND e.thread_id = v.thread_id AND e.id = v.id AND e.revision = v.revision "
            "AND e.status = 'pending' AND e.claimed_by = :worker AND e.claimed_until > :now "
            "AND (v.lease_until IS NULL OR e.claimed_until = v.lease_until)"
        )

    @functools.cached_property
    def fail(self) -> str:
        """Record a failure while the lease matches; release the worker's lease either way
        (primary key)."""
        ok = "(revision = :revision AND status = 'pending' AND claimed_until > :now)"
        return (
            f"UPDATE {self.entries} SET "
            f"attempts = CASE WHEN {ok} THEN attempts + 1 ELSE attempts END, "
            f"last_error = CASE WHEN {ok} THEN CAST(:error AS text) ELSE last_error END, "
            f"status = CASE WHEN {ok} THEN CAST(:new_status AS text) ELSE status END, "
            f"next_attempt_at = CASE WHEN {ok} THEN CAST(:retry_at AS timestamptz) "
            "ELSE next_attempt_at END, "
            "claimed_by = NULL, claimed_until = NULL "
            "WHERE tenant_id = :tenant AND resource_id = :resource AND thread_id = :thread "
            "AND id = :id AND claimed_by = :worker"
        )

    @functools.cached_property
    def store_vectors(self) -> str:
        """Re-index: store vectors where the revision matches, drop leases."""
        return (
            f"UPDATE {self.entries} e SET embedding = v.embedding, status = 'indexed', "
            f"embedding_model = CAST(:model AS text), window_embeddings = {windows_of('v.ord')}, "
            "last_error = NULL, next_attempt_at = NULL, claimed_by = NULL, claimed_until = NULL "
            "FROM unnest(CAST(:ids AS text[]), CAST(:revisions AS integer[]), "
            "CAST(:embeddings AS vector[])) WITH ORDINALITY AS v(id, revision, embedding, ord) "
            "WHERE e.tenant_id = :tenant AND e.resource_id = :resource AND e.thread_id = :thread "
            "AND e.id = v.id AND e.revision = v.revision"
        )

    @functools.cached_property
    def due_tenants(self) -> str:
        """Tenants with pending rows, in order, at most ``:limit``: a loose index scan over the
        pending-by-tenant index (``ix_pending_tenant``), one index probe per tenant however long
        any tenant's backlog is."""
        return (
            "WITH RECURSIVE turn(tenant_id) AS ("
            f"(SELECT tenant_id FROM {self.entries} WHERE status = 'pending' "
            "ORDER BY tenant_id LIMIT 1) "
            "UNION ALL "
            f"SELECT (SELECT e.tenant_id FROM {self.entries} e WHERE e.status = 'pending' "
            "AND e.tenant_id > turn.tenant_id ORDER BY e.tenant_id LIMIT 1) "
            "FROM turn WHERE turn.tenant_id IS NOT NULL) "
            "SELECT tenant_id FROM turn WHERE tenant_id IS NOT NULL LIMIT :limit"
        )


def claim_statement(
    sql: IndexingSql,
    scope: MemoryIdentity | None,
    *,
    limit: int,
    worker_id: str,
    lease_seconds: float,
    now: datetime,
    tenant_id: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """:meth:`IndexingSql.claim` for ``scope`` (else ``tenant_id``, else any scope) and its bound
    values."""
    params: dict[str, Any] = {
        "now": now,
        "until": now + timedelta(seconds=lease_seconds),
        "worker": worker_id,
        "limit": limit,
    }
    if scope is not None:
        params.update(scope_params(scope))
    elif tenant_id is not None:
        params["tenant"] = tenant_id
    statement = sql.claim(scoped=scope is not None, tenant=scope is None and tenant_id is not None)
    return statement, params


def claim_in_statement(
    sql: IndexingSql,
    scopes: Sequence[MemoryIdentity],
    *,
    limit: int,
    per_scope: int,
    worker_id: str,
    lease_seconds: float,
    now: datetime,
) -> tuple[str, dict[str, Any]]:
    """:attr:`IndexingSql.claim_in` for ``scopes`` (each once, in turn order) and its bound values."""
    return sql.claim_in, {
        "tenants": [scope.tenant_id for scope in scopes],
        "resources": [scope.resource_id for scope in scopes],
        "threads": [scope.thread_id for scope in scopes],
        "now": now,
        "until": now + timedelta(seconds=lease_seconds),
        "worker": worker_id,
        "each": per_scope,
        "limit": limit,
    }
