"""The indexing-ledger role of the store contract: :class:`IndexingLedger`.

What the indexing queue (:mod:`prism_memory.indexing`) alone depends on -- claims, leases,
results, failures -- plus the re-index's :meth:`~IndexingLedger.store_vectors` and the facade's
:meth:`~IndexingLedger.index_status`. Re-exported by :mod:`prism_memory.stores.base`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import datetime

from .._windowed import OwnVector
from ..models import IndexStatus, MemoryIdentity
from ._records import ClaimedEntry, check_claim

__all__ = ["IndexingLedger"]


class IndexingLedger(abc.ABC):
    """The indexing ledger: which entries wait for a vector, who holds them, what failed.

    Seven abstract methods (:meth:`claim_pending`, :meth:`complete_indexing`,
    :meth:`fail_indexing`, :meth:`release_claims`, :meth:`requeue_failed`, :meth:`index_status`,
    :meth:`store_vectors`) and one default, :meth:`claim_pending_in`, built on
    :meth:`claim_pending`.
    """

    @abc.abstractmethod
    async def claim_pending(
        self,
        scope: MemoryIdentity | None,
        *,
        limit: int,
        worker_id: str,
        lease_seconds: float,
        now: datetime,
    ) -> list[ClaimedEntry]:
        """Lease up to ``limit`` pending entries due for (re)trying, ordered by sequence then id.

        ``scope=None`` claims across all scopes. A row leased by another worker whose lease has not
        run out is never returned, so concurrent workers never embed a row twice.
        """

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
        """Lease up to ``limit`` due pending entries of ``scopes``, at most ``per_scope`` of each.

        The scopes are served in the order given (a worker shared by many threads rotates it, so
        no thread's backlog starves another's); within a scope rows come ordered by sequence then
        id, as :meth:`claim_pending` leases them. One call for many threads: a store should answer
        it in one round trip (this default claims scope by scope).
        """
        check_claim(limit, lease_seconds, per_scope)
        claimed: list[ClaimedEntry] = []
        for scope in dict.fromkeys(scopes):
            room = min(per_scope, limit - len(claimed))
            if room <= 0:
                break
            claimed.extend(
                await self.claim_pending(
                    scope, limit=room, worker_id=worker_id, lease_seconds=lease_seconds, now=now
                )
            )
        return claimed

    @abc.abstractmethod
    async def complete_indexing(
        self,
        items: Sequence[tuple[ClaimedEntry, OwnVector]],
        *,
        worker_id: str,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Store vectors and mark ``indexed`` where the lease and revision still match; count them.

        The lease matches while ``worker_id`` holds it, it has not run out at ``now`` and it is
        the very lease the claim set (:attr:`ClaimedEntry.lease_until`): a vector is stored only
        under the current lease, never by a worker whose lease ran out meanwhile.
        ``model`` is recorded as each stored record's ``embedding_model``.
        """

    @abc.abstractmethod
    async def fail_indexing(
        self,
        item: ClaimedEntry,
        *,
        worker_id: str,
        error: str,
        retry_at: datetime | None,
        now: datetime,
    ) -> None:
        """Record a failure: attempts + 1 and the error; due again at ``retry_at``, or ``failed`` if None.

        Applies only while the lease and revision match; the lease is released either way.
        """

    @abc.abstractmethod
    async def release_claims(self, worker_id: str) -> int:
        """Drop every lease ``worker_id`` holds, so others may claim those rows; count them."""

    @abc.abstractmethod
    async def requeue_failed(self, scope: MemoryIdentity, ids: Sequence[str] | None = None) -> int:
        """Make ``failed`` entries (all of the thread's, or ``ids``) pending again with attempts 0."""

    @abc.abstractmethod
    async def index_status(
        self, scope: MemoryIdentity, ids: Sequence[str]
    ) -> dict[str, tuple[IndexStatus, str | None]]:
        """``id -> (status, last_error)`` for the ids that exist, at their current revision."""

    @abc.abstractmethod
    async def store_vectors(
        self,
        scope: MemoryIdentity,
        items: Sequence[tuple[str, int, OwnVector]],
        *,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Re-index: set ``(id, revision, vector)`` and mark indexed where the revision matches.

        ``model`` is recorded as each stored record's ``embedding_model``.
        """
