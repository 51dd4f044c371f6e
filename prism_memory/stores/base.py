"""The storage contracts every backend implements.

The :class:`~prism_memory.Memory` facade talks to storage only through :class:`VectorStore` and
:class:`WorkingStore`. A backend subclasses them explicitly so mypy proves it conforms, and runs
:func:`prism_memory.testing.run_memory_conformance` to prove it behaves.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import ValidationError
from ..lexical import CorpusStats
from ..models import (
    Candidate,
    IndexStatus,
    Lineage,
    MemoryConsent,
    MemoryIdentity,
    MemoryRecord,
    ShareGrant,
    TombstoneReason,
    Vector,
    WorkingMemoryRecord,
)

__all__ = [
    "ClaimedEntry",
    "EntryLease",
    "GovernanceChange",
    "GovernanceResult",
    "NewEntry",
    "RecallFilter",
    "SearchRequest",
    "SearchResult",
    "SharedSource",
    "Tombstone",
    "VectorStore",
    "WorkingStore",
    "check_entry_vectors",
    "check_lease",
    "check_limit",
]


def check_limit(limit: int, name: str = "limit") -> None:
    """Adapter helper: a ``limit`` argument must be a non-negative integer."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValidationError(f"{name} must be a non-negative integer")


def check_entry_vectors(entries: Sequence[object], vectors: Sequence[Any] | Vector | None) -> None:
    """Adapter helper: ``put_entries``'s ``vectors``, when given, hold one vector per entry."""
    if vectors is not None and len(vectors) != len(entries):
        raise ValidationError(f"{len(vectors)} vectors for {len(entries)} entries")


def check_lease(lease_seconds: float) -> None:
    """Adapter helper: a lease must last a positive time."""
    if not lease_seconds > 0:
        raise ValidationError("lease_seconds must be positive")


@dataclass(frozen=True, slots=True)
class NewEntry:
    """An entry the facade has validated, redacted and given an id, ready to persist."""

    id: str
    text: str
    role: str
    metadata: Mapping[str, Any]
    consent: MemoryConsent | None
    sequence: int | None
    """``None``: the store assigns ``max(sequence in thread) + 1`` (in input order)."""
    occurred_at: datetime
    importance: float
    lineage: Lineage | None

    def stored(
        self,
        scope: MemoryIdentity,
        *,
        sequence: int,
        now: datetime,
        metadata: Mapping[str, Any],
        model: str | None,
        indexed: bool,
    ) -> MemoryRecord:
        """The record a store writes for this entry at ``sequence``: ``indexed`` with a vector of
        ``model``, else pending; ``metadata`` is the store's own copy of :attr:`metadata`."""
        return MemoryRecord(
            tenant_id=scope.tenant_id,
            resource_id=scope.resource_id,
            thread_id=scope.thread_id,
            id=self.id,
            text=self.text,
            role=self.role,
            metadata=metadata,
            consent=self.consent,
            sequence=sequence,
            occurred_at=self.occurred_at,
            created_at=now,
            written_at=now,
            importance=self.importance,
            lineage=self.lineage,
            status="indexed" if indexed else "pending",
            embedding_model=model if indexed else None,
        )


@dataclass(frozen=True, slots=True)
class RecallFilter:
    """Exclusion rules applied at assembly time, on every backend.

    A record is recallable when **all** hold (see :func:`prism_memory.stores.rules.is_recallable`):
    it is indexed (``status == "indexed"``); its effective consent is visible and not revoked; it has
    explicit consent when ``require_consent``; it is not under legal hold; ``occurred_at`` is not
    before ``occurred_after`` (the retention window); and none of its lineage sources carries a
    tombstone that invalidates it (any tombstone, except that a ``corrected`` one only invalidates
    records written before the correction: ``tombstone.created_at > record.written_at``).
    """

    now: datetime
    require_consent: bool = False
    occurred_after: datetime | None = None


@dataclass(frozen=True, slots=True)
class SharedSource:
    """Entries of a parent thread a child may recall through an unexpired share grant."""

    thread_id: str
    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One recall's candidate selection.

    The *corpus* is every recallable record of the scope's thread plus, when ``shared`` is set, the
    named entries of the parent thread (same tenant and resource) that are recallable, plus, when
    ``resource_wide`` is set, every recallable record of the *other* threads of the same tenant and
    resource whose consent scope travels (:func:`prism_memory.stores.rules.travels`: ``user`` or
    ``profile``). Each record counts once. The exclusion rules apply to every record alike, with the
    tombstones of the record's own thread. The store returns a :class:`SearchResult`: the union of
    two legs over the corpus and its statistics.

    * **Dense leg**: the ``limit`` records nearest to ``vector`` by cosine distance (a zero vector is
      at distance 1), ties by sequence then id.
    * **Lexical leg**: up to ``limit`` records containing at least one of ``terms`` (terms of
      :func:`prism_memory.lexical.tokenize`), best first by :func:`prism_memory.lexical.leg_score`
      — BM25 with every term frequency taken as 1, since stores index term *sets* — then sequence,
      then id.
    * **Statistics**: :class:`~prism_memory.lexical.CorpusStats` of the corpus — how many records,
      their total term count, and for each of ``terms`` how many records contain it.

    Order of the candidates does not matter; :mod:`prism_memory.ranking` orders them.
    """

    vector: Vector
    terms: frozenset[str]
    limit: int
    filter: RecallFilter
    shared: SharedSource | None = None
    resource_wide: bool = False


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What :meth:`VectorStore.search` returns: candidates of both legs and the corpus statistics."""

    candidates: list[Candidate]
    stats: CorpusStats
    pending: int | None = None
    """How many of the scope thread's entries wait for their vector (:meth:`VectorStore.count_pending`),
    when the store counted them in the same read; ``None`` makes recall ask ``count_pending``."""


@dataclass(frozen=True, slots=True)
class Tombstone:
    """Lineage invalidation marker: ``entry_id`` is invalid because of ``cause_id`` (often itself)."""

    entry_id: str
    cause_id: str
    reason: TombstoneReason
    created_at: datetime


@dataclass(frozen=True, slots=True)
class GovernanceChange:
    """The whole effect of one governance call, which a store applies all-or-nothing.

    Applied in this order inside one unit of work: add ``tombstones``, change ``consent`` or
    ``text`` of one entry, set legal hold on ``hold``, delete ``delete``, then remove the
    tombstones ``untombstone = (cause_id, reason)`` caused (a re-grant).
    """

    tombstones: tuple[Tombstone, ...] = ()
    consent: tuple[str, MemoryConsent] | None = None
    """``(entry_id, consent)``: replace that entry's consent (no re-embed)."""
    text: tuple[str, str, Vector] | None = None
    """``(entry_id, text, vector)``: as :meth:`VectorStore.replace_text`."""
    text_model: str | None = None
    """The ``model`` of the embedder that made ``text``'s vector (its ``embedding_model``)."""
    hold: tuple[str, ...] = ()
    delete: tuple[str, ...] = ()
    untombstone: tuple[str, TombstoneReason] | None = None


@dataclass(frozen=True, slots=True)
class GovernanceResult:
    """What :meth:`VectorStore.apply_governance` changed."""

    record: MemoryRecord | None
    """The entry whose consent or text changed, as stored afterwards."""
    held: int = 0
    deleted: int = 0


@dataclass(frozen=True, slots=True)
class ClaimedEntry:
    """A pending entry a worker has leased for embedding."""

    scope: MemoryIdentity
    id: str
    revision: int
    text: str
    attempts: int


@dataclass(frozen=True, slots=True)
class EntryLease:
    """New rows written already leased to an indexing worker, so it embeds them without claiming."""

    worker_id: str
    until: datetime
    ids: frozenset[str] | None = None
    """Only new rows with these ids are leased (the rest stay free for any worker); ``None``: all."""

    def covers(self, entry_id: str) -> bool:
        """Whether a new row ``entry_id`` is stored leased."""
        return self.ids is None or entry_id in self.ids


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


class VectorStore(abc.ABC):
    """Semantic-memory entries, their vectors, tombstones, share grants and the indexing ledger."""

    @property
    @abc.abstractmethod
    def dimension(self) -> int | None:
        """The pinned vector width, or ``None`` when the store accepts any (consistent) width."""

    # ---- entries ---------------------------------------------------------------------------

    @abc.abstractmethod
    async def put_entries(
        self,
        scope: MemoryIdentity,
        entries: Sequence[NewEntry],
        *,
        now: datetime,
        lease: EntryLease | None = None,
        vectors: Sequence[Vector] | Vector | None = None,
        model: str | None = None,
    ) -> list[MemoryRecord]:
        """Insert the ``entries`` whose id is new, atomically; return the stored records in input order.

        With ``lease``, the new rows it covers are stored leased to ``lease.worker_id`` until ``lease.until``
        (as :meth:`claim_pending` would have leased them), so the writer's own indexing worker
        embeds them without a claim and no other worker takes them meanwhile.

        With ``vectors`` (one per entry, in the order of ``entries``: a sequence of vectors or a
        matrix with one row per entry), new rows are stored already
        ``indexed`` with their vector and ``model`` as their ``embedding_model``: one write per row,
        recallable at once, never leased. Every vector is checked first (finite, the store's width):
        a bad one raises and nothing is written. The vector of an id that exists is ignored.

        A new row is ``pending``, revision 1, ``created_at = written_at = now``, and any tombstones
        left on its id by an earlier (forgotten) entry are dropped. An id that exists is left
        exactly as stored (``ON CONFLICT DO NOTHING``): a retry or replay never changes consent,
        text, ``occurred_at`` or anything else a governance call decided. The first occurrence of an
        id within one call wins.
        """

    @abc.abstractmethod
    async def get_entries(self, scope: MemoryIdentity, ids: Sequence[str]) -> list[MemoryRecord]:
        """The records of ``ids`` that exist in scope, in the order of ``ids``."""

    @abc.abstractmethod
    async def known_ids(self, scope: MemoryIdentity, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that exist in scope as entries (a forgotten id is not known)."""

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
        vector: Vector,
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
    async def dependents(
        self, scope: MemoryIdentity, source_ids: Sequence[str], *, limit: int
    ) -> list[tuple[str, tuple[str, ...]]]:
        """Up to ``limit`` entries whose lineage names any of ``source_ids``: ``(id, sources)``.

        Ordered by id, so a caller can detect that a cap was exceeded by asking for one more.
        """

    # ---- reads -----------------------------------------------------------------------------

    @abc.abstractmethod
    async def search(self, scope: MemoryIdentity, request: SearchRequest) -> SearchResult:
        """Candidate selection for recall, with the corpus statistics; see :class:`SearchRequest`."""

    @abc.abstractmethod
    async def neighbors(
        self,
        scope: MemoryIdentity,
        ranges: Sequence[tuple[int, int]],
        recall_filter: RecallFilter,
    ) -> list[MemoryRecord]:
        """Recallable records of the thread whose sequence lies in any inclusive ``(low, high)``."""

    @abc.abstractmethod
    async def list_by_thread(
        self,
        scope: MemoryIdentity,
        *,
        after: tuple[int, str] | None,
        limit: int,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` records of the thread after ``(sequence, id)``, ordered by both.

        Every record, whatever its status or consent: callers filter.
        """

    @abc.abstractmethod
    async def count_by_thread(self, scope: MemoryIdentity) -> int:
        """How many entries the thread holds."""

    async def count_pending(self, scope: MemoryIdentity) -> int:
        """How many of the thread's entries are ``pending`` (not yet embedded).

        The default pages through :meth:`list_by_thread`; adapters override it with one count.
        """
        total = 0
        after: tuple[int, str] | None = None
        while True:
            page = await self.list_by_thread(scope, after=after, limit=256)
            total += sum(1 for record in page if record.status == "pending")
            if len(page) < 256:
                return total
            after = (page[-1].sequence, page[-1].id)

    async def embedding_models(self, scope: MemoryIdentity) -> set[str]:
        """The models (``embedding_model``) whose vectors the thread's rows hold; rows without a
        recorded model (written before models were recorded, or by an embedder without one)
        are left out.

        The default pages through :meth:`list_by_thread`; adapters override it with one query.
        """
        models: set[str] = set()
        after: tuple[int, str] | None = None
        while True:
            page = await self.list_by_thread(scope, after=after, limit=256)
            models.update(r.embedding_model for r in page if r.embedding_model is not None)
            if len(page) < 256:
                return models
            after = (page[-1].sequence, page[-1].id)

    @abc.abstractmethod
    async def list_oldest(
        self,
        scope: MemoryIdentity,
        *,
        limit: int,
        occurred_before: datetime | None = None,
        include_held: bool = True,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` records ordered by ``(occurred_at, sequence, id)`` ascending.

        ``occurred_before`` keeps only records that occurred strictly before it; ``include_held``
        false leaves out records under legal hold.
        """

    # ---- tombstones and grants -------------------------------------------------------------

    @abc.abstractmethod
    async def add_tombstones(self, scope: MemoryIdentity, tombstones: Sequence[Tombstone]) -> None:
        """Insert tombstones; one that exists for ``(entry_id, cause_id, reason)`` takes the new time."""

    @abc.abstractmethod
    async def remove_tombstones(
        self, scope: MemoryIdentity, cause_id: str, reason: TombstoneReason
    ) -> int:
        """Delete the tombstones ``cause_id`` caused with ``reason``; return how many."""

    async def apply_governance(
        self, scope: MemoryIdentity, change: GovernanceChange, *, now: datetime
    ) -> GovernanceResult:
        """Apply ``change`` all-or-nothing; :class:`NotFoundError` (nothing changed) if its
        ``consent`` or ``text`` entry is absent.

        Both shipped adapters override this with one transaction. This default composes the
        primitives in a fail-closed order (tombstones first, tombstone removal last), which an
        adapter without transactions may keep: a failure part-way leaves the entries excluded.
        """
        await self.add_tombstones(scope, change.tombstones)
        record: MemoryRecord | None = None
        if change.consent is not None:
            record = await self.set_consent(scope, *change.consent, now=now)
        if change.text is not None:
            entry_id, new_text, vector = change.text
            record = await self.replace_text(
                scope, entry_id, new_text, vector, now=now, model=change.text_model
            )
        held = await self.set_legal_hold(scope, change.hold, True) if change.hold else 0
        deleted = await self.delete_entries(scope, change.delete) if change.delete else 0
        if change.untombstone is not None:
            await self.remove_tombstones(scope, *change.untombstone)
        return GovernanceResult(record=record, held=held, deleted=deleted)

    @abc.abstractmethod
    async def put_share_grant(self, grant: ShareGrant) -> ShareGrant:
        """Create or replace the grant of ``(tenant, resource, parent, child)``."""

    @abc.abstractmethod
    async def get_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> ShareGrant | None:
        """The grant, expired or not, or ``None``."""

    @abc.abstractmethod
    async def delete_share_grant(
        self, tenant_id: str, resource_id: str, parent_thread_id: str, child_thread_id: str
    ) -> int:
        """Delete the grant; return 1 if there was one, else 0."""

    # ---- indexing ledger -------------------------------------------------------------------

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
        check_limit(limit)
        check_limit(per_scope, "per_scope")
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
        items: Sequence[tuple[ClaimedEntry, Vector]],
        *,
        worker_id: str,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Store vectors and mark ``indexed`` where the lease and revision still match; count them.

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
        items: Sequence[tuple[str, int, Vector]],
        *,
        now: datetime,
        model: str | None = None,
    ) -> int:
        """Re-index: set ``(id, revision, vector)`` and mark indexed where the revision matches.

        ``model`` is recorded as each stored record's ``embedding_model``.
        """

    async def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release resources the store owns."""
