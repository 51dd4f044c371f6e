"""The deferred-indexing ledger of :class:`~prism_memory.postgres.PostgresVectorStore`: claims
(one statement each, on the driver), vector results, failures and re-queues."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..models import IndexStatus, MemoryIdentity, Vector, check_id_collection
from ..stores.base import ClaimedEntry, check_claim
from ._adapter import _VectorAdapter
from .repositories import IndexingRepository
from .rows import claimed_entries
from .statements import EntrySql, claim_in_statement, claim_statement

__all__: list[str] = []


class _IndexingLedger(_VectorAdapter):
    """The indexing-ledger methods of the vector store contract."""

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
        statement in its own transaction, on the driver: see :meth:`_write`)."""
        check_claim(limit, lease_seconds)
        if limit == 0:
            return []
        statement, params = claim_statement(
            EntrySql.for_tables(self._tables),
            scope,
            limit=limit,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=now,
        )
        return claimed_entries(await self._write("claim_pending", statement, params, visible=False))

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
        wanted = list(dict.fromkeys(scopes))
        if not wanted or limit == 0 or per_scope == 0:
            return []
        statement, params = claim_in_statement(
            EntrySql.for_tables(self._tables),
            wanted,
            limit=limit,
            per_scope=per_scope,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=now,
        )
        return claimed_entries(
            await self._write("claim_pending", statement, params, visible=False), wanted
        )

    async def complete_indexing(
        self,
        items: Sequence[tuple[ClaimedEntry, Vector]],
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
        async with self._unit("complete_indexing") as session:
            checked, width = self._check_vectors(
                ((vector, f"vectors[{at}]") for at, (_, vector) in enumerate(items)),
                await self._known_width(session),
            )
            pairs = [(item, vector) for (item, _), vector in zip(items, checked, strict=True)]
            done = await IndexingRepository(session, self._tables).complete(
                pairs, worker_id=worker_id, now=now, model=model
            )
        if done:
            self._remember_width(width)
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
        async with self._unit("fail_indexing") as session:
            await IndexingRepository(session, self._tables).fail(
                item, worker_id=worker_id, error=error, retry_at=retry_at, now=now
            )

    async def release_claims(self, worker_id: str) -> int:
        """Drop every lease ``worker_id`` holds (expired ones included); count them."""
        sql = EntrySql.for_tables(self._tables).release
        return int(
            (
                await self._write(
                    "release_claims", sql, {"worker": worker_id}, count=True, visible=False
                )
            )[0]
        )

    async def requeue_failed(self, scope: MemoryIdentity, ids: Sequence[str] | None = None) -> int:
        """Make ``failed`` entries pending again with attempts 0 (the last error is cleared)."""
        if ids is not None:
            check_id_collection(ids, "ids")
        async with self._unit("requeue_failed") as session:
            return await IndexingRepository(session, self._tables).requeue_failed(scope, ids)

    async def index_status(
        self, scope: MemoryIdentity, ids: Sequence[str]
    ) -> dict[str, tuple[IndexStatus, str | None]]:
        """``id -> (status, last_error)`` for the ids that exist, at their current revision."""
        check_id_collection(ids, "ids")
        async with self._read_unit("index_status") as session:
            return await IndexingRepository(session, self._tables).status(scope, ids)

    async def store_vectors(
        self,
        scope: MemoryIdentity,
        items: Sequence[tuple[str, int, Vector]],
        *,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Re-index: set ``(id, revision, vector)`` and mark indexed where the revision matches."""
        if not items:
            return 0
        async with self._unit("store_vectors") as session:
            checked, width = self._check_vectors(
                ((vector, f"vectors[{at}]") for at, (_, _, vector) in enumerate(items)),
                await self._known_width(session),
            )
            rows = [
                (entry_id, revision, vector)
                for (entry_id, revision, _), vector in zip(items, checked, strict=True)
            ]
            stored = await IndexingRepository(session, self._tables).store_vectors(
                scope, rows, model
            )
        if stored:
            self._remember_width(width)
        return stored
