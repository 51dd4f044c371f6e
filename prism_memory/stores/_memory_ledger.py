"""The in-memory store's indexing ledger: claims, leases, results, failures and re-index."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from .._windowed import OwnVector
from ..models import IndexStatus, MemoryIdentity, check_id_collection
from ._memory_rows import _InMemoryState, _key, _Row, _ScopeKey
from .base import ClaimedEntry, IndexingLedger, check_claim


def _due(row: _Row, now: datetime) -> bool:
    """A pending row is due once its retry time (if any) has come and its lease (if any) ran out."""
    return (row.next_attempt_at is None or row.next_attempt_at <= now) and (
        row.claimed_until is None or row.claimed_until <= now
    )


def _lease_rows(
    rows: Sequence[tuple[_ScopeKey, _Row]], worker_id: str, now: datetime, lease_seconds: float
) -> list[ClaimedEntry]:
    """Lease ``rows`` to ``worker_id`` and describe them as claimed entries."""
    until = now + timedelta(seconds=lease_seconds)
    claimed: list[ClaimedEntry] = []
    for key, row in rows:
        row.claimed_by, row.claimed_until = worker_id, until
        record = row.record
        claimed.append(
            ClaimedEntry(
                scope=MemoryIdentity(tenant_id=key[0], resource_id=key[1], thread_id=key[2]),
                id=record.id,
                revision=record.revision,
                text=record.text,
                attempts=record.attempts,
                lease_until=until,
            )
        )
    return claimed


class _InMemoryLedger(IndexingLedger):
    """The indexing ledger of the in-memory store (pending rows, leases, retries): a role object
    over the store's state, which the store delegates to."""

    __slots__ = ("_state",)

    def __init__(self, state: _InMemoryState) -> None:
        self._state = state

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

        A row is due when its retry time (if any) has come and its lease (if any) has run out.
        """
        check_claim(limit, lease_seconds)
        wanted = None if scope is None else _key(scope)
        due: list[tuple[int, str, _ScopeKey, _Row]] = []
        for key, entry_id in self._state.pending:
            if wanted is not None and key != wanted:
                continue
            row = self._state.threads[key].rows[entry_id]
            if _due(row, now):
                due.append((row.record.sequence, entry_id, key, row))
        chosen = heapq.nsmallest(limit, due, key=lambda item: item[:3])
        return _lease_rows([(key, row) for _, _, key, row in chosen], worker_id, now, lease_seconds)

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
        """Lease up to ``limit`` due entries of ``scopes`` (at most ``per_scope`` each), in one pass
        over the pending rows; the scopes are served in the order given."""
        check_claim(limit, lease_seconds, per_scope)
        order = {_key(scope): i for i, scope in enumerate(dict.fromkeys(scopes))}
        due: dict[_ScopeKey, list[tuple[int, str, _Row]]] = {}
        for key, entry_id in self._state.pending:
            if key in order:
                row = self._state.threads[key].rows[entry_id]
                if _due(row, now):
                    due.setdefault(key, []).append((row.record.sequence, entry_id, row))
        chosen: list[tuple[_ScopeKey, _Row]] = []
        for key in sorted(due, key=order.__getitem__):
            room = min(per_scope, limit - len(chosen))
            if room <= 0:
                break
            rows = heapq.nsmallest(room, due[key], key=lambda item: item[:2])
            chosen.extend((key, row) for _, _, row in rows)
        return _lease_rows(chosen, worker_id, now, lease_seconds)

    def _leased(self, item: ClaimedEntry, worker_id: str, now: datetime) -> _Row | None:
        """The row ``item`` names, if ``worker_id`` still holds its lease at its revision."""
        thread = self._state.thread(_key(item.scope))
        row = None if thread is None else thread.rows.get(item.id)
        if (
            row is None
            or row.record.status != "pending"
            or row.record.revision != item.revision
            or row.claimed_by != worker_id
            or row.claimed_until is None
            or row.claimed_until <= now
            or (item.lease_until is not None and row.claimed_until != item.lease_until)
        ):
            return None  # not this claim's lease any more: its late result is refused
        return row

    async def complete_indexing(
        self,
        items: Sequence[tuple[ClaimedEntry, OwnVector]],
        *,
        worker_id: str,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Store vectors and mark ``indexed`` where the lease and revision still match; count them.

        A lease matches while ``worker_id`` holds it and it has not run out at ``now``. Every vector
        is checked first: one bad vector rejects the whole call.
        """
        checked, width = self._state.check_vectors(
            ((vector, f"vectors[{at}]") for at, (_, vector) in enumerate(items)), model
        )
        done = 0
        for (item, _), vector in zip(items, checked, strict=True):
            row = self._leased(item, worker_id, now)
            if row is None:
                continue
            key = _key(item.scope)
            record = replace(row.record, status="indexed", last_error=None, embedding_model=model)
            self._state.set_row(key, self._state.threads[key], _Row.of(record, vector))
            done += 1
        if done:
            self._state.width = width
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
        """Record a failure: attempts + 1 and the error; due at ``retry_at``, or ``failed`` if None.

        Applies only while the lease and revision match; a lease ``worker_id`` holds on the row is
        released either way.
        """
        key = _key(item.scope)
        row = self._leased(item, worker_id, now)
        if row is not None:
            record = replace(
                row.record,
                attempts=row.record.attempts + 1,
                last_error=error,
                status="pending" if retry_at is not None else "failed",
            )
            self._state.set_row(
                key, self._state.threads[key], _Row(record, next_attempt_at=retry_at)
            )
            return
        thread = self._state.thread(key)
        other = None if thread is None else thread.rows.get(item.id)
        if other is not None and other.claimed_by == worker_id:
            other.claimed_by = other.claimed_until = None

    async def release_claims(self, worker_id: str) -> int:
        """Drop every lease ``worker_id`` holds (expired ones included); count them."""
        released = 0
        for key, entry_id in self._state.pending:  # only pending rows are ever leased
            row = self._state.threads[key].rows[entry_id]
            if row.claimed_by == worker_id:
                row.claimed_by = row.claimed_until = None
                released += 1
        return released

    async def requeue_failed(self, scope: MemoryIdentity, ids: Sequence[str] | None = None) -> int:
        """Make ``failed`` entries (all of the thread's, or ``ids``) pending again with attempts 0.

        The last error is cleared with them.
        """
        if ids is not None:
            check_id_collection(ids, "ids")
        key = _key(scope)
        thread = self._state.thread(key)
        if thread is None:
            return 0
        names = thread.rows.keys() if ids is None else dict.fromkeys(ids)
        failed = [
            thread.rows[i]
            for i in names
            if i in thread.rows and thread.rows[i].record.status == "failed"
        ]
        for row in failed:
            record = replace(row.record, status="pending", attempts=0, last_error=None)
            self._state.set_row(key, thread, _Row(record))
        return len(failed)

    async def index_status(
        self, scope: MemoryIdentity, ids: Sequence[str]
    ) -> dict[str, tuple[IndexStatus, str | None]]:
        """``id -> (status, last_error)`` for the ids that exist, at their current revision."""
        check_id_collection(ids, "ids")
        thread = self._state.thread(_key(scope))
        if thread is None:
            return {}
        rows = (thread.rows[i] for i in dict.fromkeys(ids) if i in thread.rows)
        return {row.record.id: (row.record.status, row.record.last_error) for row in rows}

    async def store_vectors(
        self,
        scope: MemoryIdentity,
        items: Sequence[tuple[str, int, OwnVector]],
        *,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Re-index: set ``(id, revision, vector)`` and mark indexed where the revision matches.

        Every vector is checked first: one bad vector rejects the whole call. A lease on a row
        that is stored is dropped (its worker's late result no longer applies).
        """
        checked, width = self._state.check_vectors(
            ((vector, f"vectors[{at}]") for at, (_, _, vector) in enumerate(items)), model
        )
        key = _key(scope)
        thread = self._state.thread(key)
        if thread is None:
            return 0
        stored = 0
        for (entry_id, revision, _), vector in zip(items, checked, strict=True):
            row = thread.rows.get(entry_id)
            if row is None or row.record.revision != revision:
                continue
            record = replace(row.record, status="indexed", last_error=None, embedding_model=model)
            self._state.set_row(key, thread, _Row.of(record, vector))
            stored += 1
        if stored:
            self._state.width = width
        return stored
