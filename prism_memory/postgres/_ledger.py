"""The deferred-indexing ledger of the PostgreSQL backend, :class:`PostgresLedger`: claims
(one statement each, committed at once), vector results, failures and re-queues -- every one a
call of :class:`~prism_memory.postgres.repositories.IndexingRepository`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from .._windowed import OwnVector
from ..models import IndexStatus, MemoryIdentity, check_id_collection
from ..stores.base import ClaimedEntry, IndexingLedger, check_claim
from ._executor import Executor
from ._generations import VectorWidth
from .repositories import EntryRepository, IndexingRepository
from .tables import PrismTables

__all__ = ["PostgresLedger"]


class PostgresLedger(IndexingLedger):
    """The :class:`~prism_memory.stores.base.IndexingLedger` of the PostgreSQL backend, over the
    entries table."""

    def __init__(self, executor: Executor, tables: PrismTables, width: VectorWidth) -> None:
        self._width = width
        self._entries = EntryRepository(executor, tables)
        self._indexing = IndexingRepository(executor, tables)

    async def claim_pending(
        self,
        scope: MemoryIdentity | None,
        *,
        limit: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
    ) -> list[ClaimedEntry]:
        """Lease due pending rows with ``FOR UPDATE SKIP LOCKED``, committed at once (one
        statement in its own transaction, on the driver)."""
        check_claim(limit, lease_seconds)
        return await self._indexing.claim(
            scope, limit=limit, worker_id=worker_id, lease_seconds=lease_seconds, now=now
        )

    async def claim_pending_in(
        self,
        scopes: Sequence[MemoryIdentity],
        *,
        limit: int,
        per_scope: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
    ) -> list[ClaimedEntry]:
        """Lease due pending rows of many threads in one statement (``FOR UPDATE SKIP LOCKED``)."""
        check_claim(limit, lease_seconds, per_scope)
        return await self._indexing.claim_in(
            scopes,
            limit=limit,
            per_scope=per_scope,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=now,
        )

    async def complete_indexing(
        self,
        items: Sequence[tuple[ClaimedEntry, OwnVector]],
        *,
        worker_id: str,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Store vectors and mark ``indexed`` where the lease and revision still match; count them.

        Every vector is checked first (finite, the store's width): one bad vector rejects the call.
        """
        if not items:
            return 0
        checked, width = self._width.check(
            ((vector, f"vectors[{at}]") for at, (_, vector) in enumerate(items)),
            await self._width.known(self._entries, model),
        )
        pairs = [(item, vector) for (item, _), vector in zip(items, checked, strict=True)]
        done = await self._indexing.complete(pairs, worker_id=worker_id, now=now, model=model)
        if done:
            self._width.learn(width)
        return done

    async def fail_indexing(
        self,
        item: ClaimedEntry,
        *,
        worker_id: str,
        error: str,
        retry_at: datetime | None,
        now: datetime,
    ) -> None:
        """Record a failure while the lease matches (attempts + 1, error, retry or ``failed``)."""
        await self._indexing.fail(
            item, worker_id=worker_id, error=error, retry_at=retry_at, now=now
        )

    async def release_claims(self, worker_id: str) -> int:
        """Drop every lease ``worker_id`` holds (expired ones included); count them."""
        return await self._indexing.release(worker_id)

    async def requeue_failed(self, scope: MemoryIdentity, ids: Sequence[str] | None = None) -> int:
        """Make ``failed`` entries pending again with attempts 0 (the last error is cleared)."""
        if ids is not None:
            check_id_collection(ids, "ids")
        return await self._indexing.requeue_failed(scope, ids)

    async def index_status(
        self, scope: MemoryIdentity, ids: Sequence[str]
    ) -> dict[str, tuple[IndexStatus, str | None]]:
        """``id -> (status, last_error)`` for the ids that exist, at their current revision."""
        check_id_collection(ids, "ids")
        return await self._indexing.status(scope, ids)

    async def store_vectors(
        self,
        scope: MemoryIdentity,
        items: Sequence[tuple[str, int, OwnVector]],
        *,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Re-index: set ``(id, revision, vector)`` and mark indexed where the revision matches."""
        if not items:
            return 0
        checked, width = self._width.check(
            ((vector, f"vectors[{at}]") for at, (_, _, vector) in enumerate(items)),
            await self._width.known(self._entries, model),
        )
        rows = [
            (entry_id, revision, vector)
            for (entry_id, revision, _), vector in zip(items, checked, strict=True)
        ]
        stored = await self._indexing.store_vectors(scope, rows, model)
        if stored:
            self._width.learn(width)
        return stored
