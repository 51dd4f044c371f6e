"""Governance on PostgreSQL: :class:`PostgresGovernance`, one change in one transaction under the
thread's advisory lock (the lock ``put_entries`` takes), every statement a call of the
repositories inside that unit."""

from __future__ import annotations

from datetime import datetime

from ..errors import NotFoundError
from ..models import MemoryIdentity, MemoryRecord
from ..stores.base import GovernanceChange, GovernanceResult, GovernanceStore, expand_walk
from ._executor import Executor
from ._generations import VectorWidth
from .repositories import EntryRepository, TombstoneRepository
from .tables import PrismTables

__all__ = ["PostgresGovernance"]


class PostgresGovernance(GovernanceStore):
    """The :class:`~prism_memory.stores.base.GovernanceStore` of the PostgreSQL backend."""

    def __init__(self, executor: Executor, tables: PrismTables, width: VectorWidth) -> None:
        self._executor = executor
        self._tables = tables
        self._width = width

    async def apply_governance(
        self, scope: MemoryIdentity, change: GovernanceChange, *, now: datetime
    ) -> GovernanceResult:
        """Apply ``change`` in one session unit, under the thread's advisory lock (see
        :meth:`~prism_memory.stores.base.GovernanceStore.apply_governance`); a failure at any
        step rolls every step back."""
        async with self._executor.unit("apply_governance", tenant=scope.tenant_id) as unit:
            entries = EntryRepository(unit, self._tables)
            tombstones = TombstoneRepository(unit, self._tables)
            await entries.lock_thread(scope)
            # the lineage walk runs under the lock, so no writer can add a dependent meanwhile
            change, dependents = await expand_walk(
                change,
                lambda ids, limit: entries.dependents(scope, ids, limit),
                lambda ids: entries.get(scope, ids),
                now,
            )
            await tombstones.upsert(scope, change.tombstones)
            record: MemoryRecord | None = None
            width: int | None = None
            if change.consent is not None:
                entry_id, consent = change.consent
                record = await entries.set_consent(scope, entry_id, consent)
                if record is None:
                    raise NotFoundError("the entry does not exist in this scope")
            if change.text is not None:
                entry_id, new_text, vector = change.text
                width = await self._width.known(entries, change.text_model)
                (checked,), width = self._width.check([(vector, "the new text's vector")], width)
                record = await entries.replace_text(
                    scope, entry_id, new_text, checked, now, change.text_model
                )
                if record is None:
                    raise NotFoundError("the entry does not exist in this scope")
            held = await entries.set_legal_hold(scope, change.hold)
            deleted = await entries.delete(scope, change.delete)
            if change.untombstone is not None:
                await tombstones.remove(scope, *change.untombstone)
        self._width.learn(width)
        return GovernanceResult.after_walk(
            record, held=held, deleted=deleted, dependents=dependents
        )
