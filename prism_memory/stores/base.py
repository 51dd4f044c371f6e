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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ..errors import CapExceededError, NotFoundError, ValidationError
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
    parse,
)

__all__ = [
    "ClaimedEntry",
    "ConsentUpdate",
    "EntryLease",
    "GovernanceChange",
    "GovernanceResult",
    "ImportRow",
    "LineageWalk",
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
    "check_lineage_sources",
    "expand_walk",
    "lineage_source_ids",
    "walk_lineage",
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
class ImportRow:
    """One entry of a bulk import (:mod:`prism_memory.importing`), checked and prepared like a
    :meth:`~prism_memory.Memory.remember` entry, with its scope and -- when it came with one or was
    embedded by the import -- its checked vector and the model that made it."""

    scope: MemoryIdentity
    entry: NewEntry
    vector: Vector | None
    model: str | None
    """The vector's model (``None`` exactly when :attr:`vector` is)."""


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
class LineageWalk:
    """Tombstone ``roots`` and their transitive lineage dependents with ``reason``.

    The store finds the dependents *inside* the unit of work that applies the change, serialised
    with the thread's writes (:meth:`VectorStore.put_entries` checks lineage under the same
    serialisation), so an entry derived from a root while the call runs is either seen and
    tombstoned or refused. More than ``max_depth`` levels or ``max_entries`` dependents raise
    :class:`~prism_memory.errors.CapExceededError` and nothing changes.
    """

    roots: tuple[str, ...]
    reason: TombstoneReason
    max_depth: int
    max_entries: int
    delete_dependents: bool = False
    """Also delete the dependents, except those under legal hold (their tombstone excludes them)."""


@dataclass(frozen=True, slots=True)
class ConsentUpdate:
    """Change one entry's consent, decided against the entry as stored inside the unit of work.

    The store reads the entry in the unit of work that applies the change (serialised with the
    thread's writers) and :func:`expand_walk` applies ``visible``, ``source`` and ``scope`` to the
    consent in force *there*: revoking an entry whose consent was in force runs ``revoke_walk``
    (tombstoning it and its dependents); granting one that was revoked removes the ``revoked``
    tombstones it caused. Decided from a read taken before the transaction, a revoke racing a
    grant (or a provenance change racing either) could store a revoked consent after the grant
    had lifted the tombstones, and the entry's dependents would be recallable again.
    """

    entry_id: str
    revoke_walk: LineageWalk
    """The walk a revocation runs (its roots: this entry), with the memory's caps."""
    visible: bool | None = None
    source: str | None = None
    scope: str | None = None

    def applied_to(self, current: MemoryConsent, now: datetime) -> MemoryConsent:
        """``current`` with this update: a revoke stamps ``revoked_at``, a grant ``granted_at``.

        :class:`~prism_memory.errors.ValidationError` (naming the field) for a bad source or scope.
        """
        changes: dict[str, Any] = {}
        if self.source is not None:
            changes["source"] = self.source
        if self.scope is not None:
            changes["scope"] = self.scope
        if self.visible is False:
            changes.update(visible=False, revoked_at=now)
        elif self.visible is True:
            changes.update(visible=True, revoked_at=None, granted_at=now)
        return parse(MemoryConsent, {**current.model_dump(), **changes}, "consent")


@dataclass(frozen=True, slots=True)
class GovernanceChange:
    """The whole effect of one governance call, which a store applies all-or-nothing.

    Applied in this order inside one unit of work: find ``walk``'s dependents, add ``tombstones``
    (and the walk's), change ``consent`` or ``text`` of one entry, set legal hold on ``hold``,
    delete ``delete`` (and the walk's dependents to delete), then remove the tombstones
    ``untombstone = (cause_id, reason)`` caused (a re-grant).
    """

    walk: LineageWalk | None = None
    tombstones: tuple[Tombstone, ...] = ()
    consent: tuple[str, MemoryConsent] | None = None
    """``(entry_id, consent)``: replace that entry's consent (no re-embed)."""
    consent_update: ConsentUpdate | None = None
    """A consent change :func:`expand_walk` resolves into ``consent``, and ``walk`` or
    ``untombstone``, against the entry as the unit of work reads it."""
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
    dependents: tuple[str, ...] = ()
    """The lineage dependents ``walk`` found (and tombstoned), for ``on_invalidate``."""
    walked: bool = False
    """The change's lineage walk ran (a consent update revokes only an entry whose consent was in
    force): ``on_invalidate`` is told about its roots and ``dependents``."""


DependentsOf = Callable[[Sequence[str], int], Awaitable[list[tuple[str, tuple[str, ...]]]]]
"""``(source_ids, limit) -> [(id, sources)]``, as :meth:`VectorStore.dependents` in one scope."""


async def walk_lineage(
    dependents_of: DependentsOf, roots: Sequence[str], *, max_depth: int, max_entries: int
) -> dict[str, str]:
    """Transitive lineage dependents of ``roots``: ``dependent id -> root that caused it``.

    :class:`~prism_memory.errors.CapExceededError` past ``max_depth`` levels or ``max_entries``
    dependents. Stores call it inside their unit of work (see :class:`LineageWalk`).
    """
    cause: dict[str, str] = {root: root for root in roots}
    frontier = list(roots)
    found: dict[str, str] = {}
    for depth in range(max_depth + 1):
        if not frontier:
            break
        # room for every already-seen row plus one more fresh row than the cap allows
        rows = await dependents_of(frontier, max_entries + len(cause) + 1)
        fresh = [(dep, sources) for dep, sources in rows if dep not in cause]
        if not fresh:
            break
        if depth == max_depth:
            raise CapExceededError(f"lineage is deeper than {max_depth}; nothing was changed")
        frontier = []
        for dep, sources in fresh:
            origin = next((cause[s] for s in sources if s in cause), roots[0])
            cause[dep] = found[dep] = origin
            frontier.append(dep)
        if len(found) > max_entries:
            raise CapExceededError(
                f"lineage touches over {max_entries} entries; nothing was changed"
            )
    return found


async def expand_walk(
    change: GovernanceChange,
    dependents_of: DependentsOf,
    records_of: Callable[[Sequence[str]], Awaitable[list[MemoryRecord]]],
    now: datetime,
) -> tuple[GovernanceChange, tuple[str, ...] | None]:
    """``change`` made plain: its ``consent_update`` and ``walk`` resolved into a consent, plain
    tombstones, deletes and tombstone removal; and the dependents the walk found (``None``: no
    walk ran, see :attr:`GovernanceResult.walked`).

    A store calls it inside the unit of work that applies the change (``dependents_of`` and
    ``records_of`` read through that unit of work): a consent update is decided against the entry
    as read there (:class:`~prism_memory.errors.NotFoundError` if it is absent), each root is
    tombstoned by itself, each dependent by the root that caused it, and with
    ``delete_dependents`` the dependents not under legal hold join ``delete``.
    """
    update = change.consent_update
    if update is not None:
        change = await _resolve_consent(change, update, records_of, now)
    walk = change.walk
    if walk is None:
        return change, None
    found = await walk_lineage(
        dependents_of, walk.roots, max_depth=walk.max_depth, max_entries=walk.max_entries
    )
    marks = [Tombstone(root, root, walk.reason, now) for root in walk.roots]
    marks += [Tombstone(dep, origin, walk.reason, now) for dep, origin in found.items()]
    delete = change.delete
    if walk.delete_dependents and found:
        held = {r.id for r in await records_of(list(found)) if r.legal_hold}
        delete = (*delete, *(dep for dep in found if dep not in held))
    expanded = replace(change, walk=None, tombstones=(*change.tombstones, *marks), delete=delete)
    return expanded, tuple(found)


async def _resolve_consent(
    change: GovernanceChange,
    update: ConsentUpdate,
    records_of: Callable[[Sequence[str]], Awaitable[list[MemoryRecord]]],
    now: datetime,
) -> GovernanceChange:
    """``change`` with ``update`` decided against the stored entry (see :class:`ConsentUpdate`)."""
    stored = await records_of([update.entry_id])
    if not stored:
        raise NotFoundError("the entry does not exist in this scope")
    current = stored[0].effective_consent
    consent = update.applied_to(current, now)
    change = replace(change, consent_update=None, consent=(update.entry_id, consent))
    was_active = current.visible and current.revoked_at is None
    if update.visible is False and was_active:
        return replace(change, walk=update.revoke_walk)
    if update.visible is True and not was_active:
        return replace(change, untombstone=(update.entry_id, "revoked"))
    return change


def lineage_source_ids(entries: Sequence[NewEntry]) -> list[str]:
    """Every lineage source ``entries`` name: the ids a store looks up in the thread, in the same
    unit of work as the write (:func:`check_lineage_sources`, and the tombstones new rows
    inherit, :func:`~prism_memory.stores.rules.inherited_tombstones`)."""
    return sorted({s for e in entries if e.lineage is not None for s in e.lineage.source_ids})


def check_lineage_sources(entries: Sequence[NewEntry], known: set[str]) -> None:
    """Adapter helper: every lineage source of ``entries`` is among them or in ``known`` (the ids
    of :func:`lineage_source_ids` the thread holds); else :class:`~prism_memory.errors.ValidationError`
    naming the entry's position, never the id, and nothing may be written."""
    batch = {entry.id for entry in entries}
    for position, entry in enumerate(entries):
        if entry.lineage is not None and any(
            s not in batch and s not in known for s in entry.lineage.source_ids
        ):
            raise ValidationError(
                f"entries[{position}]: lineage names an entry unknown in this thread"
            )


@dataclass(frozen=True, slots=True)
class ClaimedEntry:
    """A pending entry a worker has leased for embedding."""

    scope: MemoryIdentity
    id: str
    revision: int
    text: str
    attempts: int
    lease_until: datetime | None = None
    """The end of the lease this claim (or write) set: the claim's token. A store keeps the
    worker's result only while the row is still leased under exactly this lease, so work done
    under a lease that ran out and was claimed again -- by another worker or the same one -- is
    refused. ``None``: any unexpired lease of the worker will do."""


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

        Every lineage source an entry names must be one of ``entries`` or exist in the thread,
        checked in the same unit of work as the insert and serialised with
        :meth:`apply_governance` on the thread (:func:`check_lineage_sources`); otherwise
        :class:`~prism_memory.errors.ValidationError` and nothing is written. So an entry derived
        from a source that a concurrent governance call forgets is either found by that call's
        lineage walk or refused, never stored behind its back.
        """

    async def known_keys(
        self, keys: Sequence[tuple[MemoryIdentity, str]]
    ) -> set[tuple[MemoryIdentity, str]]:
        """Those ``(scope, id)`` of ``keys`` that exist as entries (:meth:`known_ids` across many
        scopes; the bulk import asks before embedding, so a re-import embeds nothing again).
        This default asks :meth:`known_ids` once per scope; a durable store overrides it with one
        statement."""
        by_scope: dict[MemoryIdentity, list[str]] = {}
        for scope, entry_id in keys:
            by_scope.setdefault(scope, []).append(entry_id)
        found: set[tuple[MemoryIdentity, str]] = set()
        for scope, ids in by_scope.items():
            found.update((scope, entry_id) for entry_id in await self.known_ids(scope, ids))
        return found

    async def import_rows(self, rows: Sequence[ImportRow], *, now: datetime) -> tuple[int, int]:
        """Insert the rows whose ``(scope, id)`` is new, all or nothing; return how many were, and
        how many of those were stored ``pending`` (without a vector).

        The bulk import's write (:func:`prism_memory.importing.import_entries`): rows of many
        scopes at once, each with :meth:`put_entries`' rules -- an existing id is left as stored,
        sequences are assigned per thread in input order, a row with a vector is stored
        ``indexed`` with its model, one without ``pending`` (unleased: any worker embeds it).
        ``rows`` hold each ``(scope, id)`` once, and their vectors one width.

        Lineage is checked, and the tombstones derived rows inherit from their sources are
        stored (:func:`~prism_memory.stores.rules.inherited_tombstones`), in the same unit of work
        as the insert, serialised with :meth:`apply_governance` on each thread, as
        :meth:`put_entries` does: a source forgotten meanwhile fails the batch, whole.

        This default calls :meth:`put_entries` once per scope and kind, the ones with vectors
        first, so a vector the store refuses (its width) fails the first call, before anything is
        written; a lineage source of another kind (a pending source of an indexed row) must be
        stored already. Both built-in stores override it: the in-memory one with one
        uninterrupted step, PostgreSQL with one transaction (a binary ``COPY`` into a staging
        table and one set-based ``INSERT``).
        """
        groups: dict[tuple[bool, MemoryIdentity, str | None], list[ImportRow]] = {}
        for row in rows:
            groups.setdefault((row.vector is None, row.scope, row.model), []).append(row)
        inserted = unindexed = 0
        for (pending, scope, model), group in sorted(groups.items(), key=lambda g: g[0][0]):
            ids = [row.entry.id for row in group]
            new = len(set(ids) - await self.known_ids(scope, ids))
            inserted += new
            unindexed += new if pending else 0
            vectors = None if pending else [row.vector for row in group if row.vector is not None]
            await self.put_entries(
                scope, [row.entry for row in group], now=now, vectors=vectors, model=model
            )
        return inserted, unindexed

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

    async def embedding_models_of(
        self, scopes: Sequence[MemoryIdentity]
    ) -> dict[MemoryIdentity, set[str]]:
        """:meth:`embedding_models` of many threads (the bulk import checks each thread of a
        batch once): the threads of ``scopes`` whose rows hold a recorded model, each with its
        models. This default asks :meth:`embedding_models` once per thread; a durable store
        overrides it with one statement."""
        found: dict[MemoryIdentity, set[str]] = {}
        for scope in dict.fromkeys(scopes):
            models = await self.embedding_models(scope)
            if models:
                found[scope] = models
        return found

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
        change, dependents = await expand_walk(
            change,
            lambda ids, limit: self.dependents(scope, ids, limit=limit),
            lambda ids: self.get_entries(scope, ids),
            now,
        )
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
        return GovernanceResult(
            record=record,
            held=held,
            deleted=deleted,
            dependents=dependents or (),
            walked=dependents is not None,
        )

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
