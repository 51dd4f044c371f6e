"""The role objects of the in-memory backend, over one shared :class:`_InMemoryState`:
:class:`_InMemoryEntries` (its writes, :mod:`._memory_writes`, and reads, :mod:`._memory_reads`),
:class:`_InMemoryGovernance` and :class:`_InMemoryGrants`; the ledger and the generations are
:class:`~._memory_ledger._InMemoryLedger` and :class:`~._memory_generations._InMemoryGenerations`.
Every method finishes without awaiting anything that yields, so each call is atomic with respect
to the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from .._windowed import OwnVector
from ..models import (
    MemoryConsent,
    MemoryIdentity,
    MemoryRecord,
    ShareGrant,
    TombstoneReason,
    check_id_collection,
)
from ._memory_reads import _EntryReads
from ._memory_rows import _export, _InMemoryState, _key, _Row
from ._memory_writes import _EntryWrites
from .base import (
    EntryStore,
    GovernanceChange,
    GovernanceResult,
    GovernanceStore,
    ShareGrants,
    Tombstone,
)
from .primitives import GovernanceSteps, apply_by_steps

__all__: list[str] = []


class _InMemoryEntries(_EntryWrites, _EntryReads, EntryStore):
    """The :class:`~prism_memory.stores.base.EntryStore` of the in-memory backend: its writes
    (:class:`_EntryWrites`) and reads (:class:`_EntryReads`) over the shared state."""

    def __init__(self, state: _InMemoryState) -> None:
        self._state = state

    @property
    def dimension(self) -> int | None:
        """The pinned width given at construction (``None``: the first vector stored fixes it)."""
        return self._state.dimension

    async def vector_width(self) -> int | None:
        """The width new own vectors are written at: the primary vector generation's once one is
        registered, else the pinned width, else the width of the first vector stored (``None``
        before it)."""
        return self._state.own_width()

    async def get_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> list[MemoryRecord]:
        """The records of ``ids`` that exist in scope, in the order of ``ids`` (each id once)."""
        check_id_collection(ids, "ids")
        thread = self._state.thread(_key(scope))
        if thread is None:
            return []
        rows = (thread.rows.get(entry_id) for entry_id in dict.fromkeys(ids))
        return [_export(row.record) for row in rows if row is not None]

    async def known_ids(self, scope: MemoryIdentity, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that exist in scope as entries (a forgotten id is not known)."""
        check_id_collection(ids, "ids")
        thread = self._state.thread(_key(scope))
        if thread is None:
            return set()
        return {i for i in ids if i in thread.rows}


class _InMemoryGovernance(GovernanceStore, GovernanceSteps):
    """The :class:`~prism_memory.stores.base.GovernanceStore` of the in-memory backend: the six
    primitives (:class:`~prism_memory.stores.primitives.GovernanceSteps`) composed by
    :func:`~prism_memory.stores.primitives.apply_by_steps`, after every check that can fail."""

    def __init__(self, state: _InMemoryState, entries: _InMemoryEntries) -> None:
        self._state = state
        self._entries = entries

    async def apply_governance(
        self, scope: MemoryIdentity, change: GovernanceChange, *, now: datetime
    ) -> GovernanceResult:
        """Apply ``change`` all-or-nothing: everything that can fail is checked first, then the
        primitives run without yielding to the event loop (see
        :meth:`~prism_memory.stores.base.GovernanceStore.apply_governance`)."""
        for target in (change.consent, change.text):
            if target is not None:
                self._state.row(scope, target[0])  # NotFoundError before anything changed
        if change.text is not None:
            self._state.check_vectors([(change.text[2], "the new text's vector")])
        # the lineage walk reads the rows as they are now, within this same uninterrupted call
        return await apply_by_steps(self, self._entries, scope, change, now=now)

    async def set_consent(
        self, scope: MemoryIdentity, entry_id: str, consent: MemoryConsent, *, now: datetime
    ) -> MemoryRecord:
        """Replace an entry's consent (no re-embed); :class:`NotFoundError` if absent."""
        key, thread, row = self._state.row(scope, entry_id)
        updated = replace(row, record=replace(row.record, consent=consent))
        self._state.set_row(key, thread, updated)
        return _export(updated.record)

    async def replace_text(
        self,
        scope: MemoryIdentity,
        entry_id: str,
        text: str,
        vector: OwnVector,
        *,
        now: datetime,
        model: str | None = None,
    ) -> MemoryRecord:
        """Set new text and its vector at once: revision + 1, ``indexed``, ``written_at = now``.

        Consent, lineage, sequence and metadata are kept. :class:`NotFoundError` if absent.
        """
        key, thread, row = self._state.row(scope, entry_id)
        (checked,), width = self._state.check_vectors([(vector, "the new text's vector")], model)
        record = replace(
            row.record,
            text=text,
            written_at=now,
            revision=row.record.revision + 1,
            status="indexed",
            attempts=0,
            last_error=None,
            embedding_model=model,
        )
        self._state.width = width
        self._state.set_row(key, thread, _Row.of(record, checked))
        return _export(record)

    async def set_legal_hold(self, scope: MemoryIdentity, ids: Sequence[str], hold: bool) -> int:
        """Set or clear legal hold on the ``ids`` that exist; return how many exist."""
        return await self._entries.set_legal_hold(scope, ids, hold)

    async def delete_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> int:
        """Really delete the ``ids`` that exist in scope, their vectors of every generation with
        them; return how many rows went."""
        return await self._entries.delete_entries(scope, ids)

    async def add_tombstones(self, scope: MemoryIdentity, tombstones: Sequence[Tombstone]) -> None:
        """Insert tombstones; an existing ``(entry_id, cause_id, reason)`` takes the new time."""
        if not tombstones:
            return
        thread = self._state.thread_for_write(_key(scope))
        for tombstone in tombstones:
            key = (tombstone.cause_id, tombstone.reason)
            thread.tombstones.setdefault(tombstone.entry_id, {})[key] = tombstone
        thread.tombstoned(tombstone.entry_id for tombstone in tombstones)

    async def remove_tombstones(
        self, scope: MemoryIdentity, cause_id: str, reason: TombstoneReason
    ) -> int:
        """Delete the tombstones ``cause_id`` caused with ``reason``; return how many."""
        thread = self._state.thread(_key(scope))
        if thread is None:
            return 0
        lifted: list[str] = []
        for entry_id, by_cause in list(thread.tombstones.items()):
            if by_cause.pop((cause_id, reason), None) is not None:
                lifted.append(entry_id)
                if not by_cause:
                    del thread.tombstones[entry_id]
        if lifted:
            thread.tombstoned(lifted)
        return len(lifted)


class _InMemoryGrants(ShareGrants):
    """The :class:`~prism_memory.stores.base.ShareGrants` of the in-memory backend."""

    def __init__(self, state: _InMemoryState) -> None:
        self._state = state

    async def put_share_grant(self, grant: ShareGrant) -> ShareGrant:
        """Create or replace the grant of ``(tenant, resource, parent, child)``."""
        stored = replace(grant, source_ids=tuple(grant.source_ids))
        key = (grant.tenant_id, grant.resource_id, grant.parent_thread_id, grant.child_thread_id)
        self._state.grants[key] = stored
        return stored

    async def get_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> ShareGrant | None:
        """The grant, expired or not, or ``None``."""
        return self._state.grants.get((tenant_id, resource_id, parent_thread_id, child_thread_id))

    async def delete_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> int:
        """Delete the grant; return 1 if there was one, else 0."""
        key = (tenant_id, resource_id, parent_thread_id, child_thread_id)
        return 0 if self._state.grants.pop(key, None) is None else 1
