"""The deferred-indexing ledger: claims (the queue's and the service worker's), vector results,
failures, lease releases, re-queues and status."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import update

from ..._windowed import OwnVector
from ...models import IndexStatus, MemoryIdentity
from ...stores.base import ClaimedEntry
from .._engine import encode_vector
from ..rows import claimed_entries, scope_params, window_params
from ..statements import claim_in_statement, claim_statement
from ._base import _in_array, _Repository, _rowcount

__all__ = ["IndexingRepository"]


class IndexingRepository(_Repository):
    """The deferred-indexing ledger on the entries table: claims, results, failures."""

    __slots__ = ()

    async def claim(
        self,
        scope: MemoryIdentity | None,
        *,
        limit: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
        tenant_id: str | None = None,
    ) -> list[ClaimedEntry]:
        """Lease up to ``limit`` due pending rows (of ``scope``, else of ``tenant_id``, else of any
        scope), ordered by sequence then id."""
        if limit == 0:
            return []
        statement, params = claim_statement(
            self.sql.indexing,
            scope,
            limit=limit,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=now,
            tenant_id=tenant_id,
        )
        rows = await self._written("claim_pending", statement, params, visible=False)
        return claimed_entries(rows)

    async def claim_in(
        self,
        scopes: Sequence[MemoryIdentity],
        *,
        limit: int,
        per_scope: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
    ) -> list[ClaimedEntry]:
        """Lease up to ``limit`` due pending rows of many threads, at most ``per_scope`` each, in
        one statement; in the order of ``scopes``."""
        wanted = list(dict.fromkeys(scopes))
        if not wanted or limit == 0 or per_scope == 0:
            return []
        statement, params = claim_in_statement(
            self.sql.indexing,
            wanted,
            limit=limit,
            per_scope=per_scope,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=now,
        )
        rows = await self._written("claim_pending", statement, params, visible=False)
        return claimed_entries(rows, wanted)

    async def release(self, worker_id: str) -> int:
        """Drop every lease ``worker_id`` holds (expired ones included); count them."""
        return await self._changed(
            "release_claims", self.sql.indexing.release, {"worker": worker_id}, visible=False
        )

    async def due_tenants(self, limit: int) -> list[str]:
        """Tenants with pending rows, in order, at most ``limit`` (:attr:`IndexingSql.due_tenants`)."""
        statement = self.sql.indexing.due_tenants
        rows = await self._rows("listing tenants with pending rows", statement, {"limit": limit})
        return [str(row["tenant_id"]) for row in rows]

    async def complete(
        self,
        items: Sequence[tuple[ClaimedEntry, OwnVector]],
        *,
        worker_id: str,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Store vectors where lease and revision match (one statement); count them."""
        if not items:
            return 0
        mains, windows = window_params([vector for _, vector in items])
        params = {
            **windows,
            "tenants": [item.scope.tenant_id for item, _ in items],
            "resources": [item.scope.resource_id for item, _ in items],
            "threads": [item.scope.thread_id for item, _ in items],
            "ids": [item.id for item, _ in items],
            "revisions": [item.revision for item, _ in items],
            "embeddings": [encode_vector(vector) for vector in mains],
            "leases": [item.lease_until for item, _ in items],
            "worker": worker_id,
            "now": now,
            "model": model,
        }
        return await self._changed("complete_indexing", self.sql.indexing.complete, params)

    async def fail(
        self,
        item: ClaimedEntry,
        *,
        worker_id: str,
        error: str,
        retry_at: datetime | None,
        now: datetime,
    ) -> None:
        """Record a failure while the lease matches; release the lease either way."""
        params = {
            **scope_params(item.scope),
            "id": item.id,
            "revision": item.revision,
            "worker": worker_id,
            "error": error,
            "retry_at": retry_at,
            "new_status": "pending" if retry_at is not None else "failed",
            "now": now,
        }
        await self._changed("fail_indexing", self.sql.indexing.fail, params)

    async def requeue_failed(self, scope: MemoryIdentity, ids: Sequence[str] | None) -> int:
        """Failed rows (all of the thread's, or ``ids``) become pending with attempts 0."""
        t = self.tables.entries
        stmt = update(t).where(
            t.c.tenant_id == scope.tenant_id,
            t.c.resource_id == scope.resource_id,
            t.c.thread_id == scope.thread_id,
            t.c.status == "failed",
        )
        if ids is not None:
            wanted = list(dict.fromkeys(ids))
            if not wanted:
                return 0
            stmt = stmt.where(_in_array(t.c.id, wanted))
        stmt = stmt.values(
            status="pending",
            attempts=0,
            last_error=None,
            next_attempt_at=None,
            claimed_by=None,
            claimed_until=None,
        )
        async with self._session("requeue_failed") as session:
            return _rowcount(await session.execute(stmt))

    async def status(
        self, scope: MemoryIdentity, ids: Sequence[str]
    ) -> dict[str, tuple[IndexStatus, str | None]]:
        """``id -> (status, last_error)`` for the ids that exist -- read from the primary, even
        with a read replica: it is the indexing ledger's own state, which a worker (maybe another
        process) has just written there, and what ``done`` and the queue's watchers poll; read on
        a lagging replica, a worker-only memory's ``done`` waited for the standby's replay."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        # one array parameter however many ids are watched, one primary-key descent per id
        params = {**scope_params(scope), "ids": wanted}
        rows = await self._rows("index_status", self.sql.rows.index_status, params)
        return {row["id"]: (row["status"], row["last_error"]) for row in rows}

    async def store_vectors(
        self,
        scope: MemoryIdentity,
        items: Sequence[tuple[str, int, OwnVector]],
        model: str | None = None,
    ) -> int:
        """Set vectors where the revision matches (one statement); count them."""
        if not items:
            return 0
        mains, windows = window_params([vector for _, _, vector in items])
        params = {
            **scope_params(scope),
            **windows,
            "ids": [entry_id for entry_id, _, _ in items],
            "revisions": [int(revision) for _, revision, _ in items],
            "embeddings": [encode_vector(vector) for vector in mains],
            "model": model,
        }
        return await self._changed("store_vectors", self.sql.indexing.store_vectors, params)
