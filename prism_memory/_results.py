"""Records and results: the immutable dataclasses the library hands back (and the stores exchange).

:mod:`prism_memory.models` re-exports them. Nothing here knows about a store: a store that decodes
rows reads a record from one itself (PostgreSQL's :func:`~prism_memory.postgres.rows.record_from_row`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ._inputs import DEFAULT_LEXICAL_WEIGHT, Lineage, MemoryConsent, MemoryIdentity

Vector = npt.NDArray[np.float32]
"""A one-dimensional float32 embedding."""

IndexStatus = Literal["pending", "indexed", "failed"]
TombstoneReason = Literal["forgotten", "revoked", "corrected", "held", "retention"]


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A stored semantic-memory entry as the library sees it."""

    tenant_id: str
    resource_id: str
    thread_id: str
    id: str
    text: str
    role: str
    metadata: Mapping[str, Any]
    consent: MemoryConsent | None
    """``None`` for entries remembered without explicit consent (treated as the default)."""
    sequence: int
    occurred_at: datetime
    created_at: datetime
    written_at: datetime
    """When text or lineage was last written (lineage invalidation compares against it)."""
    importance: float
    lineage: Lineage | None = None
    legal_hold: bool = False
    status: IndexStatus = "pending"
    revision: int = 1
    """Bumped whenever the text changes; an embedding is only stored for its own revision."""
    attempts: int = 0
    last_error: str | None = None
    embedding_model: str | None = None
    """The ``model`` identifier of the embedder that made the stored vector (``None``: unknown)."""

    @property
    def effective_consent(self) -> MemoryConsent:
        """The consent in force: the explicit one, or the default."""
        return self.consent if self.consent is not None else MemoryConsent()

    @property
    def identity(self) -> MemoryIdentity:
        """The thread scope this record belongs to."""
        return MemoryIdentity(
            tenant_id=self.tenant_id, resource_id=self.resource_id, thread_id=self.thread_id
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (used by export)."""
        return {
            "id": self.id,
            "tenant_id": self.tenant_id,
            "resource_id": self.resource_id,
            "thread_id": self.thread_id,
            "text": self.text,
            "role": self.role,
            "metadata": dict(self.metadata),
            "consent": None if self.consent is None else self.consent.model_dump(mode="json"),
            "sequence": self.sequence,
            "occurred_at": self.occurred_at.isoformat(),
            "created_at": self.created_at.isoformat(),
            "importance": self.importance,
            "lineage": None if self.lineage is None else self.lineage.model_dump(mode="json"),
        }


class Candidate:
    """A recall candidate a store returns: the record and its stored embedding.

    ``Candidate(record, vector)`` is all a store needs. Ranking reads only a few of the record's
    fields, and a recall keeps ``top_k`` of its ``4 × top_k`` candidates (or more), so a store
    that decodes rows may use :meth:`deferred` instead: it passes those fields and a function
    that builds the record, which runs once, when ``record`` is first read — for the hits only.

    ``profile`` spares the re-rank tokenizing ``text`` again (a store keeps each entry's terms
    from when it was written): ``(counts, length)`` where ``counts`` maps every term of the
    search request (:attr:`SearchRequest.terms <prism_memory.stores.base.SearchRequest.terms>`)
    the entry holds to its number of occurrences -- it may hold other terms too -- and ``length``
    is the entry's term count. ``None``: ranking tokenizes ``text``.
    """

    __slots__ = (
        "_build",
        "_record",
        "embedding_model",
        "id",
        "importance",
        "occurred_at",
        "profile",
        "sequence",
        "text",
        "thread_id",
        "vector",
        "windows",
    )

    vector: Vector
    thread_id: str
    id: str
    text: str
    sequence: int
    occurred_at: datetime
    importance: float
    embedding_model: str | None
    profile: tuple[Mapping[str, int], int] | None
    windows: Vector | None
    """The later windows' vectors of an entry longer than its embedder's window, as a
    ``(k, width)`` matrix (:mod:`prism_memory.windows`); ``None`` for an entry within it."""

    def __init__(
        self,
        record: MemoryRecord,
        vector: Vector,
        profile: tuple[Mapping[str, int], int] | None = None,
        windows: Vector | None = None,
    ) -> None:
        self._record: MemoryRecord | None = record
        self._build: Callable[[], MemoryRecord] | None = None
        self.vector, self.profile, self.windows = vector, profile, windows
        self.thread_id, self.id, self.text = record.thread_id, record.id, record.text
        self.sequence, self.occurred_at = record.sequence, record.occurred_at
        self.importance, self.embedding_model = record.importance, record.embedding_model

    @classmethod
    def deferred(
        cls,
        vector: Vector,
        *,
        thread_id: str,
        id: str,
        text: str,
        sequence: int,
        occurred_at: datetime,
        importance: float,
        embedding_model: str | None,
        build: Callable[[], MemoryRecord],
        profile: tuple[Mapping[str, int], int] | None = None,
        windows: Vector | None = None,
    ) -> Candidate:
        """A candidate whose record ``build`` makes on first use; the fields must be the record's."""
        return deferred_candidate(
            vector,
            thread_id,
            id,
            text,
            sequence,
            occurred_at,
            importance,
            embedding_model,
            build,
            profile,
            windows,
        )

    @property
    def record(self) -> MemoryRecord:
        """The candidate's record (built on first read when the store deferred it)."""
        if self._record is None:
            assert self._build is not None
            self._record, self._build = self._build(), None
        return self._record

    def __repr__(self) -> str:
        return f"Candidate(thread_id={self.thread_id!r}, id={self.id!r}, sequence={self.sequence})"


def deferred_candidate(
    vector: Vector,
    thread_id: str,
    id: str,
    text: str,
    sequence: int,
    occurred_at: datetime,
    importance: float,
    embedding_model: str | None,
    build: Callable[[], MemoryRecord],
    profile: tuple[Mapping[str, int], int] | None = None,
    windows: Vector | None = None,
) -> Candidate:
    """:meth:`Candidate.deferred`, positionally: a store decoding many rows calls it per row (no
    keyword parsing, no classmethod lookup)."""
    candidate = _new_candidate(Candidate)
    candidate._record, candidate._build = None, build
    candidate.vector = vector
    candidate.profile = profile
    candidate.windows = windows
    candidate.thread_id, candidate.id, candidate.text = thread_id, id, text
    candidate.sequence, candidate.occurred_at = sequence, occurred_at
    candidate.importance, candidate.embedding_model = importance, embedding_model
    return candidate


_new_candidate = Candidate.__new__


@dataclass(frozen=True, slots=True)
class WorkingMemoryRecord:
    """The working-memory document of a scope, with its version (starts at 1)."""

    version: int
    data: Mapping[str, Any]
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class IndexingReport:
    """What became of the entries one ``remember()`` handed to the indexing queue."""

    indexed: tuple[str, ...]
    failed: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RememberResult:
    """``accepted`` ids are durable; ``pending`` ones await embedding; ``done`` resolves once they have."""

    accepted: tuple[str, ...]
    pending: tuple[str, ...]
    done: Awaitable[IndexingReport]


@dataclass(frozen=True, slots=True)
class RecallHit:
    """One recalled entry with its score components."""

    record: MemoryRecord
    similarity: float
    """Fusion of cosine and BM25, each brought to a common scale (see :mod:`prism_memory.ranking`)."""
    semantic: float
    """True cosine similarity of query and entry, in [−1, 1] (never clamped)."""
    lexical: float
    """Lexical evidence (BM25 above the chance margin) divided by the best candidate's, in [0, 1]."""
    recency: float
    importance: float
    score: float
    shared: bool = False
    """True when another thread owns the hit: a parent's entry through a share grant, or a
    ``user``/``profile`` entry reached by ``recall(..., scope="resource")``."""
    bm25: float = 0.0
    """Raw BM25 of the entry for the query, over the recall scope's statistics."""
    semantic_scale: float = 1.0
    """The largest ``|cosine|`` among the candidates, which ``semantic`` was divided by (1 if 0)."""
    bm25_scale: float = 1.0
    """The divisor of the lexical evidence: the best candidate's evidence, 1 when it is 0."""
    bm25_chance: float = 0.0
    """The part of ``bm25`` discounted as chance: ``lexical = (bm25 − bm25_chance) / bm25_scale``."""
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT
    """The weight the lexical signal got in this recall's fusion (λ times the candidates' median
    normalised cosine): ``similarity = (1 − w)·semantic / semantic_scale + w·lexical``."""
    rerank_score: float | None = None
    """The reranker's score when a :class:`~prism_memory.reranking.Reranker` ordered this hit
    (hits are then in this order, not ``score`` order); ``None`` without one."""

    @property
    def id(self) -> str:
        """The entry id."""
        return self.record.id

    @property
    def text(self) -> str:
        """The entry text."""
        return self.record.text


@dataclass(frozen=True, slots=True)
class RecallExplanation:
    """Why a hit ranked where it did (``recall(explain=True)``)."""

    id: str
    rank: int
    score: float
    similarity: float
    semantic: float
    lexical: float
    recency: float
    importance: float
    weights: tuple[float, float, float]
    """Normalised ``(similarity, recency, importance)`` weights used."""
    bm25: float = 0.0
    """Raw BM25 behind ``lexical``."""
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT
    """λ of the fusion that produced ``similarity`` (the ceiling; ``how`` gives the weight used)."""
    how: Mapping[str, str] = field(default_factory=dict)
    """How each component was computed, with the numbers used (keys: semantic, lexical,
    similarity, score; and rerank when a reranker ordered the hits)."""
    reranker: str | None = None
    """The ``model`` of the reranker that ordered the hits, or ``None`` when none did."""
    rerank_score: float | None = None
    """That reranker's score of this hit (the order's key), or ``None``."""


@dataclass(frozen=True, slots=True)
class RecallResult:
    """Hits in score order, adjacent entries in chronological order, optional explanations."""

    hits: tuple[RecallHit, ...]
    adjacent: tuple[MemoryRecord, ...] = ()
    explanations: tuple[RecallExplanation, ...] | None = None
    pending: int = 0
    """How many of the thread's entries were still waiting for their vector when recall ran
    (so could not be recalled): non-zero right after ``remember()`` explains a missing hit."""


@dataclass(frozen=True, slots=True)
class ShareGrant:
    """A parent thread's allow-list of entries a child thread may recall."""

    tenant_id: str
    resource_id: str
    parent_thread_id: str
    child_thread_id: str
    source_ids: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """Outcome of one bounded retention sweep.

    ``blocked`` lists the due entries left in place because deleting them would touch more lineage
    than the caps allow; everything else due was deleted.
    """

    deleted: int
    scanned: int
    blocked: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ExportPage:
    """One page of an identity-bound export; pass ``next_cursor`` back to continue."""

    entries: tuple[dict[str, Any], ...]
    bytes: int
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class RebuildPage:
    """One page of a re-index; store ``next_cursor`` durably to resume."""

    rebuilt: int
    next_cursor: str | None
