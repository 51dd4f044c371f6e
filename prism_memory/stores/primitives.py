"""Governance from six primitives: an optional base for a simple adapter.

:meth:`VectorStore.apply_governance <prism_memory.stores.base.VectorStore.apply_governance>` is
one abstract method, which a transactional store implements as one transaction. An adapter
without transactions may subclass :class:`GovernancePrimitives` instead and write six smaller
methods -- set consent, replace text, set legal hold, delete, add and remove tombstones -- which
its :meth:`~GovernancePrimitives.apply_governance` composes in a fail-closed order. The in-memory
reference store does (each of its calls is atomic with respect to the event loop).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import datetime

from .._windowed import OwnVector
from ..models import MemoryConsent, MemoryIdentity, MemoryRecord, TombstoneReason
from .base import (
    EntryStore,
    GovernanceChange,
    GovernanceResult,
    Tombstone,
    VectorStore,
    expand_walk,
)

__all__ = ["GovernancePrimitives", "GovernanceSteps", "apply_by_steps"]


class GovernanceSteps(abc.ABC):
    """The six primitives a governance change is composed of (:func:`apply_by_steps`)."""

    @abc.abstractmethod
    async def set_consent(
        self, scope: MemoryIdentity, entry_id: str, consent: MemoryConsent, *, now: datetime
    ) -> MemoryRecord:
        """Replace an entry's consent (no re-embed); :class:`NotFoundError` if absent."""

    @abc.abstractmethod
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

        ``model`` (the embedder's identifier) is recorded as the record's ``embedding_model``.
        Consent, lineage, sequence and metadata are kept. :class:`NotFoundError` if absent.
        """

    @abc.abstractmethod
    async def set_legal_hold(self, scope: MemoryIdentity, ids: Sequence[str], hold: bool) -> int:
        """Set or clear legal hold on the ``ids`` that exist; return how many exist."""

    @abc.abstractmethod
    async def delete_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> int:
        """Really delete the ``ids`` (callers batch); return how many rows went."""

    @abc.abstractmethod
    async def add_tombstones(self, scope: MemoryIdentity, tombstones: Sequence[Tombstone]) -> None:
        """Insert tombstones; one that exists for ``(entry_id, cause_id, reason)`` takes the new time."""

    @abc.abstractmethod
    async def remove_tombstones(
        self, scope: MemoryIdentity, cause_id: str, reason: TombstoneReason
    ) -> int:
        """Delete the tombstones ``cause_id`` caused with ``reason``; return how many."""


async def apply_by_steps(
    steps: GovernanceSteps,
    entries: EntryStore,
    scope: MemoryIdentity,
    change: GovernanceChange,
    *,
    now: datetime,
) -> GovernanceResult:
    """Apply ``change`` with ``steps``' primitives, its lineage walk read through ``entries``.

    The primitives run in a fail-closed order (tombstones first, tombstone removal last), which
    an adapter without transactions may keep: a failure part-way leaves the entries excluded (by
    their own tombstones). :class:`NotFoundError` (nothing changed) if the change's ``consent``
    or ``text`` entry is absent.
    """
    change, dependents = await expand_walk(
        change,
        lambda ids, limit: entries.dependents(scope, ids, limit=limit),
        lambda ids: entries.get_entries(scope, ids),
        now,
    )
    await steps.add_tombstones(scope, change.tombstones)
    record: MemoryRecord | None = None
    if change.consent is not None:
        record = await steps.set_consent(scope, *change.consent, now=now)
    if change.text is not None:
        entry_id, new_text, vector = change.text
        record = await steps.replace_text(
            scope, entry_id, new_text, vector, now=now, model=change.text_model
        )
    held = await steps.set_legal_hold(scope, change.hold, True) if change.hold else 0
    deleted = await steps.delete_entries(scope, change.delete) if change.delete else 0
    if change.untombstone is not None:
        await steps.remove_tombstones(scope, *change.untombstone)
    return GovernanceResult.after_walk(record, held=held, deleted=deleted, dependents=dependents)


class GovernancePrimitives(VectorStore, GovernanceSteps):
    """A :class:`~prism_memory.stores.base.VectorStore` whose governance composes six primitives
    (:class:`GovernanceSteps`)."""

    async def apply_governance(
        self, scope: MemoryIdentity, change: GovernanceChange, *, now: datetime
    ) -> GovernanceResult:
        """Apply ``change`` all-or-nothing; :class:`NotFoundError` (nothing changed) if its
        ``consent`` or ``text`` entry is absent.

        This composes the primitives in a fail-closed order (:func:`apply_by_steps`), which an
        adapter without transactions may keep: a failure part-way leaves the entries excluded
        (by their own tombstones). The PostgreSQL store instead applies the change in one
        transaction.
        """
        return await apply_by_steps(self, self, scope, change, now=now)
