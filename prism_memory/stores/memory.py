"""In-memory reference adapters: the library default and the behaviour every backend is held to.

:class:`InMemoryVectorStore` keeps each thread's rows, tombstones and a lazily built search index in
plain dictionaries on the *instance* (nothing lives on the class), so two stores never share data.
Every method finishes without awaiting, so each call is atomic with respect to the event loop; write
methods also validate all their input before they change anything, so a call that raises leaves the
store as it was.

Search is exact: cosine over a per-thread numpy matrix of the rows that pass the static part of
:func:`~prism_memory.stores.rules.is_recallable`, with the per-request parts (consent requirement
and retention window) applied as vectorised masks.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..errors import ConflictError
from ..models import WorkingMemoryRecord
from ._delegation import via
from ._memory_generations import _InMemoryGenerations
from ._memory_ledger import _InMemoryLedger
from ._memory_roles import _InMemoryEntries, _InMemoryGovernance, _InMemoryGrants
from ._memory_rows import _InMemoryState
from .backend import GenerationsOfRole, MemoryBackend, VectorStoreOfRoles
from .base import WorkingStore
from .primitives import GovernancePrimitives

__all__ = ["InMemoryVectorStore", "InMemoryWorkingStore", "in_memory_backend"]

_WorkingKey = tuple[str, str, str | None]


def in_memory_backend(*, dimension: int | None = None) -> MemoryBackend:
    """The in-memory backend as a bundle of role objects over one shared state (the default of
    ``create_memory``), with vector generations and a working store of its own."""
    return InMemoryVectorStore(dimension=dimension).backend(InMemoryWorkingStore())


class InMemoryVectorStore(VectorStoreOfRoles, GovernancePrimitives, GenerationsOfRole):
    """The reference :class:`VectorStore`: exact, per-instance and process-local; with vector
    generations (:class:`~prism_memory.stores.base.VectorGenerations`).

    ``dimension`` pins the vector width; when it is ``None`` the first stored vector fixes the width
    and a later vector of another width raises :class:`~prism_memory.errors.DimensionMismatchError`.

    The in-memory backend's role objects over one state (:class:`_InMemoryState`), in one object
    for compatibility: :attr:`entries` (writes and reads), :attr:`ledger`, :attr:`governance`
    (the six primitives of :class:`~prism_memory.stores.primitives.GovernancePrimitives`),
    :attr:`grants` and :attr:`vector_generations`. Every role method of this object is its role
    object's (:class:`~prism_memory.stores.backend.VectorStoreOfRoles`); a memory made on it
    calls the role objects directly (:meth:`backend`).
    """

    def __init__(self, *, dimension: int | None = None) -> None:
        self._state = _InMemoryState(dimension=dimension)
        self.entries = _InMemoryEntries(self._state)
        """Entries: writes, reads and the vector width."""
        self.ledger = _InMemoryLedger(self._state)
        """The indexing ledger."""
        self.governance = _InMemoryGovernance(self._state, self.entries)
        """Governance, composed of six primitives."""
        self.grants = _InMemoryGrants(self._state)
        """Share grants."""
        self.vector_generations = _InMemoryGenerations(self._state)
        """Vector generations."""

    def __repr__(self) -> str:
        return f"InMemoryVectorStore(dimension={self._state.dimension})"

    apply_governance = via("governance", GovernancePrimitives.apply_governance)
    set_consent = via("governance", GovernancePrimitives.set_consent)
    replace_text = via("governance", GovernancePrimitives.replace_text)
    set_legal_hold = via("governance", GovernancePrimitives.set_legal_hold)
    delete_entries = via("governance", GovernancePrimitives.delete_entries)
    add_tombstones = via("governance", GovernancePrimitives.add_tombstones)
    remove_tombstones = via("governance", GovernancePrimitives.remove_tombstones)


class InMemoryWorkingStore(WorkingStore):
    """The reference :class:`WorkingStore`: versioned documents held by this instance.

    Data is deep-copied on the way in and out, so callers never share state with the store.
    """

    def __init__(self) -> None:
        self._documents: dict[_WorkingKey, WorkingMemoryRecord] = {}

    def __repr__(self) -> str:
        return "InMemoryWorkingStore()"

    async def get_working(
        self, tenant_id: str, resource_id: str, thread_id: str | None
    ) -> WorkingMemoryRecord | None:
        """The current document, or ``None`` when none was written."""
        document = self._documents.get((tenant_id, resource_id, thread_id))
        return None if document is None else _copy_document(document)

    async def put_working(
        self,
        tenant_id: str,
        resource_id: str,
        thread_id: str | None,
        data: Mapping[str, Any],
        *,
        expected_version: int | None,
        now: datetime,
    ) -> WorkingMemoryRecord:
        """Write ``data`` as version ``current + 1`` (1 for the first write), atomically.

        With ``expected_version`` set, the write happens only if the current version equals it
        (``0`` means "no document yet"); otherwise :class:`~prism_memory.errors.ConflictError`.
        """
        key = (tenant_id, resource_id, thread_id)
        current = self._documents.get(key)
        version = 0 if current is None else current.version
        if expected_version is not None and expected_version != version:
            raise ConflictError(
                f"working memory is at version {version}, expected {expected_version}"
            )
        document = WorkingMemoryRecord(
            version=version + 1, data=copy.deepcopy(dict(data)), updated_at=now
        )
        self._documents[key] = document
        return _copy_document(document)


def _copy_document(document: WorkingMemoryRecord) -> WorkingMemoryRecord:
    return replace(document, data=copy.deepcopy(dict(document.data)))
