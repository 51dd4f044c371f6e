"""The records the store contracts exchange -- entries to write, recall requests and results,
tombstones, claims and leases -- and the argument checks every store adapter applies to them alike
(re-exported by :mod:`prism_memory.stores.base`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .._windowed import OwnVector
from ..errors import ValidationError
from ..lexical import CorpusStats, TextTerms
from ..models import (
    Candidate,
    Lineage,
    MemoryConsent,
    MemoryIdentity,
    MemoryRecord,
    TombstoneReason,
    Vector,
)


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
    terms: TextTerms | None = field(default=None, compare=False)
    """:func:`~prism_memory.lexical.text_terms` of :attr:`text`, when the write path made them
    (off the event loop for a large batch: :mod:`prism_memory._offload`); ``None``: the store
    tokenizes the text itself. Not part of the entry's identity (equality ignores it)."""

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
class MetadataPatch:
    """Top-level metadata keys to set on one entry, applied only while the entry is still the
    version a caller read (its ``revision`` and ``written_at``), so a patch computed from an old
    read never lands on a row rewritten or re-inserted since (:meth:`VectorStore.merge_metadata
    <prism_memory.stores.base.VectorStore.merge_metadata>`)."""

    revision: int
    written_at: datetime
    values: Mapping[str, Any]
    """The keys to set (a key mapped to ``None`` is stored as JSON ``null``); every other key of
    the entry's metadata is kept."""


@dataclass(frozen=True, slots=True)
class ImportRow:
    """One entry of a bulk import (:mod:`prism_memory.importing`), checked and prepared like a
    :meth:`~prism_memory.Memory.remember` entry, with its scope and -- when it came with one or was
    embedded by the import -- its checked vector and the model that made it."""

    scope: MemoryIdentity
    entry: NewEntry
    vector: OwnVector | None
    model: str | None
    """The vector's model (``None`` exactly when :attr:`vector` is)."""
    terms: tuple[str, ...] | None = None
    """:func:`~prism_memory.lexical.tokenize` of the entry's text, when the import has it already
    (it tokenizes a batch while the previous one is written); ``None``: the store tokenizes."""


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
      at distance 1), ties by sequence then id. A record whose own vector came with later windows
      (:class:`~prism_memory.windows.WindowedVector`) is as near as its best window with the
      margin: ``min(distance of its vector, distance of its nearest later window + δ)``,
      ``δ =`` :data:`~prism_memory.windows.WINDOW_MARGIN`; its candidate carries those windows.
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
    model: str | None = None
    """The model that embedded :attr:`vector`, for a store with vector generations
    (:class:`~prism_memory.stores.base.VectorGenerations`): while it has two, a registered model
    (``None``: the primary's) ranks each entry's vector of that model -- its own when the entry
    records that model, else the one kept beside it -- and an entry without one at its current
    revision is not in the corpus (it counts as pending). A store without generations, or with
    only one, ranks the entries' own vectors."""


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What :meth:`VectorStore.search` returns: candidates of both legs and the corpus statistics."""

    candidates: Sequence[Candidate]
    """A list of :class:`Candidate` objects, or -- from a store that decodes rows -- the same as
    columns (:class:`~prism_memory._columns.CandidateColumns`, a sequence of candidates made on
    access), which the re-rank reads without an object per candidate."""
    stats: CorpusStats
    pending: int | None = None
    """How many of the scope thread's entries wait for their vector (:meth:`VectorStore.count_pending`),
    when the store counted them in the same read; ``None`` makes recall ask ``count_pending``."""
    active_model: str | None = None
    """The model of the store's active vector generation, read in the same snapshot as the
    candidates (``None``: the store has no generations). When it is not the request's model the
    facade embeds the query again with the active model and searches again, so no answer ranks
    one model's query against another's vectors."""


@dataclass(frozen=True, slots=True)
class Tombstone:
    """Lineage invalidation marker: ``entry_id`` is invalid because of ``cause_id`` (often itself)."""

    entry_id: str
    cause_id: str
    reason: TombstoneReason
    created_at: datetime


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


class StoredEntries(list[MemoryRecord]):
    """What :meth:`~prism_memory.stores.base.VectorStore.put_entries` returns: the stored records
    in input order (a ``list``), and :attr:`inserted`, the ids of the rows this very call inserted.

    The writer hands exactly these rows on (to its indexing worker, or as indexed at once); an id
    that existed -- a replay, or a row another writer inserted first -- is not among them, however
    its record looks.
    """

    __slots__ = ("inserted",)

    def __init__(
        self, records: Iterable[MemoryRecord] = (), *, inserted: Iterable[str] = ()
    ) -> None:
        super().__init__(records)
        self.inserted: frozenset[str] = frozenset(inserted)
        """The ids of the rows this call inserted (each a row of this list)."""


# ---- adapter helpers: the argument checks every store applies alike ---------------------------

MAX_SWITCH_LAG_SECONDS = 3600.0
"""The largest ``max_lag_seconds`` of :meth:`~prism_memory.stores.base.VectorGenerations.switch_generation`."""


def check_max_lag(max_lag_seconds: object) -> float:
    """Adapter helper: ``switch_generation``'s ``max_lag_seconds``, a finite number of seconds
    from 0 to :data:`MAX_SWITCH_LAG_SECONDS`."""
    if (
        isinstance(max_lag_seconds, bool)
        or not isinstance(max_lag_seconds, int | float)
        or not math.isfinite(max_lag_seconds)
        or not 0 <= max_lag_seconds <= MAX_SWITCH_LAG_SECONDS
    ):
        raise ValidationError(
            f"max_lag_seconds must be a number of seconds from 0 to {MAX_SWITCH_LAG_SECONDS:g}"
        )
    return float(max_lag_seconds)


def not_ready_message(missing: int, recent: int, max_lag_seconds: float) -> str:
    """Adapter helper: the message of the
    :class:`~prism_memory.errors.GenerationNotReadyError` a refused switch raises."""
    if not max_lag_seconds:
        return (
            f"{missing} indexed entries have no vector of the model at their current revision: "
            "run the backfill to its end, or force the switch"
        )
    return (
        f"{missing} indexed entries written over {max_lag_seconds:g} s ago have no vector of the "
        f"model at their current revision ({recent} written since have none either, within the "
        "lag allowed): run the backfill (with --follow it keeps up with writers), or force the "
        "switch"
    )


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


def check_claim(limit: int, lease_seconds: float, per_scope: int | None = None) -> None:
    """Adapter helper: the arguments of ``claim_pending`` (and, with ``per_scope``,
    ``claim_pending_in``) -- non-negative counts and a lease of positive length."""
    check_limit(limit)
    if per_scope is not None:
        check_limit(per_scope, "per_scope")
    check_lease(lease_seconds)


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
