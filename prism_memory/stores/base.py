"""The storage contracts every backend implements.

The :class:`~prism_memory.Memory` facade talks to storage only through :class:`VectorStore` and
:class:`WorkingStore`. A backend subclasses them explicitly so mypy proves it conforms, and runs
:func:`prism_memory.testing.run_memory_conformance` to prove it behaves.

:class:`VectorStore` is the union of four roles, each a small abstract class of its own, and each
caller depends on the roles it uses only:

* :class:`EntryStore` -- entries, recall's reads and the vector width (the facade, the importer);
* :class:`IndexingLedger` -- claims, leases and vectors (the indexing queue, re-index);
* :class:`GovernanceStore` -- one governance change, all or nothing (forget, hold, consent,
  correct);
* :class:`ShareGrants` -- the grants of ``Memory.share``.

One more role is optional, outside :class:`VectorStore`: :class:`VectorGenerations`, vectors of a
second embedding model beside the entries' own, for a model change without an outage.

:data:`VECTOR_STORE_ROLES` lists them; the conformance suite checks each role on its own
(``run_memory_conformance(..., roles=...)``).

Division of labour
------------------
* Stores **select and persist**. They never rank: :meth:`VectorStore.search` returns candidates with
  their stored vectors, plus the corpus statistics of the recall scope, and
  :mod:`prism_memory.ranking` orders them, identically for every backend.
* Stores tokenize only with :func:`prism_memory.lexical.tokenize`, so a term, a document length and a
  document frequency mean the same on every backend.
* Stores **enforce the exclusion rules** of :class:`RecallFilter` inside the query (so SQL backends
  never ship excluded rows), using the rule :func:`prism_memory.stores.rules.is_recallable` states
  in Python.
* Every method is scoped: a row of another tenant, resource or thread is never read, written or
  deleted, whatever ids a caller passes.
* Times are timezone-aware and are passed in by the facade (``now``) so every backend agrees.
* Every write method is atomic: it applies entirely or not at all. A governance call's whole effect
  goes through one :meth:`VectorStore.apply_governance`, so its tombstones and its data change
  commit together (see the invariants in :mod:`prism_memory.stores.rules`).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..models import WorkingMemoryRecord
from ._governance import (
    ConsentUpdate,
    DependentsOf,
    GovernanceChange,
    GovernanceResult,
    LineageWalk,
    expand_walk,
    walk_lineage,
)
from ._records import (
    ClaimedEntry,
    EntryLease,
    ImportRow,
    MetadataPatch,
    NewEntry,
    RecallFilter,
    SearchRequest,
    SearchResult,
    SharedSource,
    StoredEntries,
    Tombstone,
    check_claim,
    check_entry_vectors,
    check_lease,
    check_limit,
    check_lineage_sources,
    check_max_lag,
    lineage_source_ids,
    not_ready_message,
)
from ._role_entries import EntryStore, every_record
from ._role_generations import (
    EntryKey,
    Generation,
    GenerationProgress,
    GenerationRole,
    Promotion,
    VectorGenerations,
)
from ._role_governance import GovernanceStore
from ._role_grants import ShareGrants
from ._role_ledger import IndexingLedger

__all__ = [
    "VECTOR_STORE_ROLES",
    "ClaimedEntry",
    "ConsentUpdate",
    "DependentsOf",
    "EntryKey",
    "EntryLease",
    "EntryStore",
    "Generation",
    "GenerationProgress",
    "GenerationRole",
    "GovernanceChange",
    "GovernanceResult",
    "GovernanceStore",
    "ImportRow",
    "IndexingLedger",
    "LineageWalk",
    "MetadataPatch",
    "NewEntry",
    "Promotion",
    "RecallFilter",
    "SearchRequest",
    "SearchResult",
    "ShareGrants",
    "SharedSource",
    "StoredEntries",
    "Tombstone",
    "VectorGenerations",
    "VectorStore",
    "WorkingStore",
    "check_claim",
    "check_entry_vectors",
    "check_lease",
    "check_limit",
    "check_lineage_sources",
    "check_max_lag",
    "every_record",
    "expand_walk",
    "lineage_source_ids",
    "not_ready_message",
    "walk_lineage",
]


class WorkingStore(abc.ABC):
    """Versioned working-memory documents, one per ``(tenant, resource, thread or None)``."""

    @abc.abstractmethod
    async def get_working(
        self, tenant_id: str, resource_id: str, thread_id: str | None
    ) -> WorkingMemoryRecord | None:
        """The current document, or ``None`` when none was written."""

    @abc.abstractmethod
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

    async def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release resources the store owns."""


class VectorStore(EntryStore, IndexingLedger, GovernanceStore, ShareGrants):
    """Semantic-memory entries, their vectors, tombstones, share grants and the indexing ledger:
    the union of the four roles (:class:`EntryStore`, :class:`IndexingLedger`,
    :class:`GovernanceStore`, :class:`ShareGrants`), which is what the facade takes.

    An adapter implements the roles' abstract methods -- what the facade, the indexing queue and
    the importer call -- and may override the defaults (:meth:`known_ids`,
    :meth:`count_by_thread`, :meth:`count_pending`, :meth:`embedding_models`,
    :meth:`claim_pending_in`, :meth:`known_keys`, :meth:`import_rows`), which are built on them.
    An adapter without transactions may take :meth:`apply_governance` from
    :class:`~prism_memory.stores.primitives.GovernancePrimitives` instead, by writing six
    smaller primitives. An adapter that leaves a role out (no share grants, say) still subclasses
    :class:`VectorStore` and makes that role's methods raise
    :class:`~prism_memory.errors.ConfigurationError`; it runs the conformance checks of the roles
    it keeps.
    """

    async def close(self) -> None:
        """Release resources the store owns."""


VECTOR_STORE_ROLES: Mapping[str, type[abc.ABC]] = {
    "entries": EntryStore,
    "indexing": IndexingLedger,
    "governance": GovernanceStore,
    "shares": ShareGrants,
}
"""The roles :class:`VectorStore` is made of, by the name the conformance suite gives them."""
